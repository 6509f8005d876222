"""The host's time in one batch of the server's dynamic batcher, and the batcher's throughput.

    python benchmarks/batch_host_time.py [--models squeezenet,mobilenetv2] [--loops 20]
        [--clients 256] [--seconds 5] [--out FILE.json]

In one process, on the default device: batches of 32 one-item requests, then of requests of
1 to 6 items (21 items, padded to 32), each gathered at once and run through ``Batcher._run``.
Reported per model, the median over ``--loops`` batches of the host's time before the GPU
(from the batch's start to its first submission: the extractor, the plan, the inputs written)
and after it (from the last fence to the answers: the outputs read and handed out), in ms;
then requests/s with ``--clients`` tasks sending one item each for ``--seconds`` through a
batcher of the server's settings, and the mean batch size.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import MODELS, emit

from asyncvk import Net, Option
from asyncvk.serve._batcher import Batcher, BatchSettings

#: the request sizes of each measured batch: 32 items, then 21 padded to 32
BATCHES = ([1] * 32, [1, 2, 3, 4, 5, 6])


class _TimedBatcher(Batcher):
    """A batcher that notes when each batch starts and ends (``marks``, with the device's)."""

    marks: list[float]

    async def _run(self, batch: Any) -> None:
        self.marks.clear()
        self.marks.append(time.perf_counter())
        await super()._run(batch)
        self.marks.append(time.perf_counter())


async def _host_ms(net: Net, x: np.ndarray, sizes: list[int], loops: int) -> dict[str, float]:
    """Median host time before and after the GPU of a batch of requests of ``sizes`` items."""
    assert net.device is not None
    device = net.device
    batcher = _TimedBatcher(
        net, BatchSettings(max_batch=32, max_inflight=1, max_batch_bytes=1 << 40)
    )
    batcher.marks = marks = []
    run = device.run

    async def timed_run(recorder: Any) -> None:
        marks.append(time.perf_counter())
        await run(recorder)
        marks.append(time.perf_counter())

    rng = np.random.default_rng(0)
    requests = [(x + rng.normal(0, 0.1, (n, *x.shape))).astype(np.float32) for n in sizes]
    device.run = timed_run  # type: ignore[method-assign]
    try:
        await batcher.infer({"in0": requests[0][:1]})  # the shape's first batch runs alone
        before, after = [], []
        for i in range(loops + 2):  # the first two make the plan and warm it
            await asyncio.gather(*(batcher.infer({"in0": r}) for r in requests))
            if i >= 2:
                before.append(marks[1] - marks[0])
                after.append(marks[-1] - marks[-2])
    finally:
        device.run = run  # type: ignore[method-assign]
    return {
        "before_gpu_ms": round(statistics.median(before) * 1e3, 3),
        "after_gpu_ms": round(statistics.median(after) * 1e3, 3),
    }


async def _throughput(net: Net, x: np.ndarray, clients: int, seconds: float) -> dict[str, float]:
    batcher = Batcher(net)  # the server's settings: max_batch 32, max_inflight 2
    one = x[np.newaxis].astype(np.float32)
    for size in range(1, 33):  # every batch size's plan made first
        await asyncio.gather(*(batcher.infer({"in0": one}) for _ in range(size)))
    done = 0
    end = time.perf_counter() + seconds

    async def client() -> None:
        nonlocal done
        while time.perf_counter() < end:
            await batcher.infer({"in0": one})
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    stats = batcher.statistics
    return {
        "requests_per_s": round(done / (time.perf_counter() - start), 1),
        "mean_batch_items": round(stats.items / max(stats.batches, 1), 2),
    }


async def _model(folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    async with Net(Option(plan_idle_seconds=600)) as net:
        await net.load_param(folder / "model.param")
        await net.load_model(folder / "model.bin")
        await net.background_builds()
        x = np.load(folder / "input.npy")
        assert net.device is not None
        report: dict[str, Any] = {"model": folder.name, "device": net.device.info.device_name}
        for sizes in BATCHES:
            report[f"items_{sum(sizes)}"] = await _host_ms(net, x, sizes, args.loops)
        report["throughput"] = await _throughput(net, x, args.clients, args.seconds)
        return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="squeezenet,mobilenetv2")
    parser.add_argument("--loops", type=int, default=20)
    parser.add_argument("--clients", type=int, default=256)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--out")
    args = parser.parse_args()
    models = [asyncio.run(_model(MODELS / m, args)) for m in args.models.split(",")]
    host = {"cpus": os.cpu_count(), "python": platform.python_version()}
    emit({"benchmark": "batch_host_time", "host": host, "models": models}, args.out)


if __name__ == "__main__":
    main()
