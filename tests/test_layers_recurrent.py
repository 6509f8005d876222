"""RNN, LSTM and GRU against ncnn itself (the wheel's CPU fp32): the GPU path on lavapipe (one
dispatch per time step) and the CPU path, over every direction, one and many steps, widths that
are not multiples of 4, initial and final states, the LSTM's projection and stacked layers; bad
params are a ModelFormatError naming the param, bad blobs an InputError."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import (
    Model,
    assert_close,
    asyncvk_forward,
    ncnn_forward,
    tagged,
    write_model,
)

from asyncvk import InputError
from asyncvk._errors import ModelFormatError

pytest.importorskip("ncnn")
pytestmark = needs_vulkan

#: weight rows per hidden unit and bias rows, as ncnn stores them
GATES = {"RNN": (1, 1), "LSTM": (4, 4), "GRU": (3, 4)}


@dataclass(frozen=True)
class Rnn:
    """One recurrent layer: type, num_output, input width, direction, LSTM hidden_size (0: no
    param 3), whether it takes initial states and how many outputs it gives."""

    kind: str
    num_output: int
    size: int
    direction: int = 0
    hidden_size: int = 0
    states_in: bool = False
    outputs: int = 1

    def __str__(self) -> str:
        projection = f"-hidden{self.hidden_size}" if self.hidden_size else ""
        states = "-states" if self.states_in else ""
        return (
            f"{self.kind}-{self.num_output}x{self.size}-dir{self.direction}{projection}{states}"
            f"-out{self.outputs}"
        )

    @property
    def dirs(self) -> int:
        return 2 if self.direction == 2 else 1

    @property
    def hidden(self) -> int:
        return self.hidden_size or self.num_output

    @property
    def state_count(self) -> int:
        return 2 if self.kind == "LSTM" else 1

    def state_widths(self) -> list[int]:
        return [self.num_output, self.hidden][: self.state_count]

    def weights(self, rng: np.random.Generator) -> list[bytes]:
        gates, bias_rows = GATES[self.kind]
        d, h, n = self.dirs, self.hidden, self.num_output
        shapes = [(d, gates * h, self.size), (d, bias_rows, h), (d, gates * h, n)]
        if self.hidden != n:
            shapes.append((d, n, h))
        return [tagged(rng.uniform(-0.6, 0.6, s).astype(np.float32)) for s in shapes]

    def line(self, name: str, x: str, prefix: str) -> tuple[str, list[str], list[str]]:
        """The layer line, its state inputs (made by Input layers) and its tops."""
        gates, _ = GATES[self.kind]
        wds = self.dirs * gates * self.hidden * self.size
        params = f"0={self.num_output} 1={wds} 2={self.direction}"
        if self.hidden_size:
            params += f" 3={self.hidden_size}"
        states = [f"{prefix}s{i}" for i in range(self.state_count)] if self.states_in else []
        tops = [f"{prefix}y{i}" for i in range(self.outputs)]
        bottoms = [x, *states]
        text = f"{self.kind} {name} {len(bottoms)} {len(tops)} {' '.join(bottoms + tops)} {params}"
        return text, states, tops


def build(
    tmp_path: Path, layers: list[Rnn], steps: int, seed: str, one_d: bool = False
) -> tuple[Model, dict[str, np.ndarray], list[str]]:
    """A model of ``layers`` in a row (each reads the previous one's first output), random
    weights, inputs (initial states too) and the names of every output."""
    rng = np.random.default_rng(zlib.crc32(seed.encode()))
    lines = ["Input in0 0 1 in0"]
    inputs = {"in0": rng.uniform(-1, 1, (layers[0].size,) if one_d else (steps, layers[0].size))}
    weights: list[bytes] = []
    outputs: list[str] = []
    x = "in0"
    for i, layer in enumerate(layers):
        text, states, tops = layer.line(f"rnn{i}", x, f"l{i}")
        for name, width in zip(states, layer.state_widths(), strict=False):
            lines.append(f"Input {name} 0 1 {name}")
            # one direction's state as (width,) where the width is odd, (1, width) where even:
            # ncnn takes both
            shape = (width,) if layer.dirs == 1 and width % 2 else (layer.dirs, width)
            inputs[name] = rng.uniform(-1, 1, shape)
        lines.append(text)
        weights += layer.weights(rng)
        outputs += tops
        x = tops[0]
    blobs = len(inputs) + len(outputs)
    param = f"7767517\n{len(lines)} {blobs}\n" + "\n".join(lines) + "\n"
    model = write_model(tmp_path, param, weights)
    return model, {k: v.astype(np.float32) for k, v in inputs.items()}, outputs


async def check(tmp_path: Path, layers: list[Rnn], steps: int, seed: str, **kw: bool) -> None:
    model, inputs, outputs = build(tmp_path, layers, steps, seed, **kw)
    theirs = ncnn_forward(model, inputs, outputs)
    gpu, cpu_types = await asyncvk_forward(model, inputs, outputs, gpu=True)
    assert not cpu_types & set(GATES), f"fell back to the CPU: {cpu_types}"
    cpu, _ = await asyncvk_forward(model, inputs, outputs, gpu=False)
    for name in outputs:
        assert_close(gpu[name], theirs[name], f"gpu {name}")
        assert_close(cpu[name], theirs[name], f"cpu {name}")


CASES = [
    Rnn(kind, n, size, direction)
    for kind in GATES
    for n, size in ((7, 5), (1, 3))
    for direction in (0, 1, 2)
]


@pytest.mark.parametrize("steps", [1, 6])
@pytest.mark.parametrize("layer", CASES, ids=str)
async def test_every_direction_matches_ncnn(tmp_path: Path, layer: Rnn, steps: int) -> None:
    await check(tmp_path, [layer], steps, f"{layer}{steps}")


STATE_CASES = [
    Rnn(kind, 6, 9, direction, states_in=states_in, outputs=3 if final and kind == "LSTM" else 2)
    if final
    else Rnn(kind, 6, 9, direction, states_in=states_in)
    for kind in GATES
    for direction in (0, 1, 2)
    for states_in, final in ((True, False), (False, True), (True, True))
]


@pytest.mark.parametrize("layer", STATE_CASES, ids=str)
async def test_initial_and_final_states_match_ncnn(tmp_path: Path, layer: Rnn) -> None:
    """Initial states in, final states out (RNN and GRU one state, the LSTM two)."""
    await check(tmp_path, [layer], 5, str(layer))


PROJECTIONS = [
    Rnn("LSTM", 5, 7, direction, hidden, states_in, outputs)
    for direction, hidden, states_in, outputs in (
        (0, 9, False, 1),
        (1, 3, True, 3),
        (2, 11, True, 3),
        (2, 2, False, 3),
    )
]


@pytest.mark.parametrize("layer", PROJECTIONS, ids=str)
async def test_lstm_projection_matches_ncnn(tmp_path: Path, layer: Rnn) -> None:
    await check(tmp_path, [layer], 4, str(layer))


async def test_stacked_layers_match_ncnn(tmp_path: Path) -> None:
    """Two LSTMs in a row (bidirectional into forward), then a GRU and an RNN."""
    layers = [
        Rnn("LSTM", 10, 13, 2),
        Rnn("LSTM", 6, 20, 0, outputs=3),
        Rnn("GRU", 9, 6, 1, states_in=True, outputs=2),
        Rnn("RNN", 3, 9, 2),
    ]
    await check(tmp_path, layers, 7, "stacked")


async def test_more_units_than_a_workgroup_match_ncnn(tmp_path: Path) -> None:
    """Many steps and more hidden units than one workgroup of 64."""
    layers = [Rnn("LSTM", 67, 33, 2, outputs=3), Rnn("GRU", 70, 134, 0)]
    await check(tmp_path, layers, 40, "wide")


@pytest.mark.parametrize("kind", list(GATES))
async def test_a_1d_input_is_one_step(tmp_path: Path, kind: str) -> None:
    await check(tmp_path, [Rnn(kind, 5, 11, 2)], 1, f"1d{kind}", one_d=True)


def _param(line: str) -> str:
    tops = int(line.split()[3])
    return f"7767517\n2 {1 + tops}\nInput in0 0 1 in0\n{line}\n"


BAD_PARAMS = [
    ("LSTM op 1 1 in0 out 0=4 1=32 8=1", "LSTM param 8 int8_scale_term=1: int8"),
    ("GRU op 1 1 in0 out 0=4 1=24 2=3", "GRU param 2 direction=3: must be 0"),
    ("RNN op 1 1 in0 out 0=0 1=24", "RNN param 0 num_output=0 must be > 0"),
    ("RNN op 1 1 in0 out 0=4 1=30", "RNN param 1 weight_data_size=30 must be a positive"),
    (
        "GRU op 1 1 in0 out 0=4 1=36 2=2",
        "GRU param 1 weight_data_size=36 must be a positive multiple of 24",
    ),
    ("LSTM op 1 1 in0 out 0=4 1=32 3=-1", "LSTM param 3 hidden_size=-1 must be > 0"),
    ("LSTM op 1 2 in0 out h 0=4 1=32", "LSTM takes 1 or 3 input blobs and gives 1 or 3"),
    ("RNN op 1 3 in0 out h c 0=4 1=16", "RNN gives 1 to 2 output blobs, got 3"),
]


@pytest.mark.parametrize(("line", "message"), BAD_PARAMS, ids=[b[1][:24] for b in BAD_PARAMS])
async def test_bad_params_name_the_param(tmp_path: Path, line: str, message: str) -> None:
    model = write_model(tmp_path, _param(line), [bytes(4096)])
    with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
        await asyncvk_forward(model, {"in0": np.ones((3, 4), np.float32)}, ["out"])
    assert (caught.value.line, caught.value.layer) == (4, "op")


BAD_SHAPES = [
    ((3, 5), None, "RNN: input width 5 is not the 4 inputs of its weights"),
    ((2, 3, 4), None, "RNN takes a dims 1 or 2 blob (T, size), got shape (2, 3, 4)"),
    ((3, 4), (2, 6), "RNN: initial state 1 must be (1, 6) or (6,), got (2, 6)"),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize(("shape", "state", "message"), BAD_SHAPES, ids=[b[2] for b in BAD_SHAPES])
async def test_a_blob_the_layer_cannot_take_is_an_input_error(
    tmp_path: Path,
    shape: tuple[int, ...],
    state: tuple[int, ...] | None,
    message: str,
    gpu: bool,
) -> None:
    layer = Rnn("RNN", 6, 4, states_in=state is not None)
    model, _, outputs = build(tmp_path, [layer], 3, "bad")
    inputs = {"in0": np.ones(shape, np.float32)}
    if state is not None:
        inputs["l0s0"] = np.ones(state, np.float32)
    with pytest.raises(InputError, match=re.escape(message)):
        await asyncvk_forward(model, inputs, outputs, gpu=gpu)
