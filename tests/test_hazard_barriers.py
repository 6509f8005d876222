"""Plans order layers by the memory they touch: a barrier only where a command reads what one
since the last barrier wrote, or writes what one read or wrote (``CommandRecorder._order``).

A missing barrier is a race that lavapipe may never show (it runs one command at a time) and a
GPU shows only sometimes, so comparing outputs cannot test this. Instead every command a plan
records is logged with the byte ranges it reads and writes (a binding counts as read only when
the shader's source declares it ``readonly``, read off the registry here, not the artifact),
and every pair of commands between two barriers is checked for a read-after-write,
write-after-read or write-after-write on overlapping bytes of one VkBuffer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asyncvk import Net, Option
from asyncvk.gpu import _command
from asyncvk.gpu._memory import Buffer
from asyncvk.net import _plan
from asyncvk.shader._interface import declared_interface
from asyncvk.shader._registry import builtin_shaders

MODELS = Path(__file__).parent / "models"

Range = tuple[Any, int, int]


@dataclass
class Command:
    what: str
    reads: list[Range]
    writes: list[Range]


@dataclass
class Recording:
    """One command buffer's commands, split at its barriers."""

    intervals: list[list[Command]] = field(default_factory=lambda: [[]])


def _range(b: Buffer) -> Range:
    return (b.vk_buffer, b.offset, b.offset + b.size)


_READ_ONLY = re.compile(r"layout\s*\(\s*binding\s*=\s*(\d+)\s*\)\s*readonly\s+buffer\b")


def _read_only(source: str) -> set[int]:
    """The bindings ``source`` declares ``layout(binding = n) readonly buffer``: read here on
    its own, so that a mistake in the interface parser the recorder uses shows as a race."""
    return {int(n) for n in _READ_ONLY.findall(source)}


def _meet(a: list[Range], b: list[Range]) -> bool:
    return any(x == y and s < f and t < e for x, s, e in a for y, t, f in b)


@pytest.fixture
def recordings(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[int, Recording]]:
    """Every command buffer recorded while the test runs, by recorder."""
    logged: dict[int, Recording] = {}
    registry = builtin_shaders()
    dispatch, copy, barrier = (
        _command.CommandRecorder.dispatch,
        _command.CommandRecorder.copy,
        _command.CommandRecorder.barrier,
    )

    def log(rec: Any) -> Recording:
        return logged.setdefault(id(rec), Recording())

    def logged_dispatch(rec: Any, pipeline: Any, buffers: Any, *args: Any) -> None:
        dispatch(rec, pipeline, buffers, *args)  # first: a barrier it puts before is logged
        read_only = _read_only(registry.get(pipeline.name).source)
        reads = [_range(b) for b in buffers]
        writes = [_range(b) for i, b in enumerate(buffers) if i not in read_only]
        log(rec).intervals[-1].append(Command(pipeline.name, reads, writes))

    def logged_copy(rec: Any, src: Buffer, dst: Buffer, size: int | None = None) -> None:
        copy(rec, src, dst, size)
        n = min(src.size, dst.size) if size is None else size
        log(rec).intervals[-1].append(
            Command("copy", [_range(src.sub(0, n))], [_range(dst.sub(0, n))])
        )

    def logged_barrier(rec: Any) -> None:
        barrier(rec)
        log(rec).intervals.append([])

    monkeypatch.setattr(_command.CommandRecorder, "dispatch", logged_dispatch)
    monkeypatch.setattr(_command.CommandRecorder, "copy", logged_copy)
    monkeypatch.setattr(_command.CommandRecorder, "barrier", logged_barrier)
    yield logged


def _races(recording: Recording) -> list[str]:
    found = []
    for interval in recording.intervals:
        for i, first in enumerate(interval):
            for second in interval[i + 1 :]:
                if _meet(second.reads, first.writes) or _meet(
                    second.writes, first.reads + first.writes
                ):
                    found.append(f"{first.what} then {second.what} with no barrier between")
    return found


async def _run_model(folder: Path) -> None:
    """One extraction of a tests/models model, its output checked against the reference."""
    meta = json.loads((folder / "meta.json").read_text())
    async with Net(Option()) as net:
        await net.load_param(folder / "model.param")
        await net.load_model(folder / "model.bin")
        ex = net.create_extractor()
        ex.input(meta["input"], np.load(folder / "input.npy"))
        got = await ex.extract(meta["output"])
    want = np.load(folder / "output.npy")
    assert np.linalg.norm(got - want) <= 1e-3 * np.linalg.norm(want)


@pytest.mark.parametrize("model", sorted(p.name for p in MODELS.iterdir() if p.is_dir()))
async def test_no_two_commands_race(model: str, recordings: dict[int, Recording]) -> None:
    """Every pair of commands between two barriers touches disjoint bytes, or only reads."""
    await _run_model(MODELS / model)
    assert recordings, "nothing was recorded"
    races = [race for rec in recordings.values() for race in _races(rec)]
    assert not races, races[:5]


async def test_independent_layers_share_a_barrier(recordings: dict[int, Recording]) -> None:
    """squeezenet's fire modules run their 1x1 and 3x3 expands side by side: some interval
    between barriers holds two dispatches. A barrier after every layer would hold one."""
    await _run_model(MODELS / "squeezenet")
    widest = max(
        sum(c.what != "copy" for c in interval)
        for rec in recordings.values()
        for interval in rec.intervals
    )
    assert widest >= 2


async def test_a_profiling_plan_keeps_a_barrier_after_every_layer() -> None:
    from asyncvk.net._dispatch_profile import ProfiledPlan

    assert _plan.Plan.barriers_on_hazards and not ProfiledPlan.barriers_on_hazards


def test_read_only_bindings_are_read_off_the_source() -> None:
    """Only ``readonly`` storage buffers of set 0 count; ``writeonly`` and unqualified ones
    may be written, and so may every binding of a shader whose source is not known."""
    source = """
    #version 450
    layout(local_size_x = 64) in;
    layout(binding = 0) readonly buffer In { float x[]; };
    layout(binding = 1) writeonly buffer Out { float y[]; };
    layout(binding = 2) buffer Both { float z[]; };
    layout(binding = 3) readonly buffer Weight { float w[]; };
    layout(set = 1, binding = 4) readonly buffer Other { float v[]; };
    void main() {}
    """
    assert declared_interface(source).read_only_bindings == frozenset({0, 3})
    # one binding declared twice (two views of one buffer): read-only only if both say so
    twice = source.replace("layout(binding = 1) writeonly", "layout(binding = 0) writeonly")
    assert declared_interface(twice).read_only_bindings == frozenset({3})
    gather = builtin_shaders().get("gather").source
    assert declared_interface(gather).read_only_bindings == frozenset({0, 2})
