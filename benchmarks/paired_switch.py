"""Two settings of one shader choice, timed in pairs inside one process.

    python benchmarks/paired_switch.py --model DIR --choice gemm_vec4_loads
        [--values '[false, true]'] [--pairs 8] [--out FILE.json]

On a machine whose speed drifts from minute to minute (the 2-core lavapipe box), two fresh
processes run minutes apart can differ by more than the change being measured. Here one Net is
loaded per value of the choice (a field of ``asyncvk.gpu.ShaderChoices``, given to each Net in
its Option), and their extractions alternate (A B, then B A), so drift hits both alike. The
report gives each value's min and median,
the ratio of each pair (last value over first) and the largest difference between their
outputs (0.0 when a change keeps the same products: it cannot tell the variants apart).

With ``--layer-types Convolution,ConvolutionDepthWise`` a run's time is the device time of
those layers' dispatches (the dispatch profiler's timestamps) instead of the wall time of the
whole extraction: a change to one shader, measured without the rest of the model's noise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import blob_names, emit

from asyncvk import Net, Option, get_gpu_info
from asyncvk.gpu import ShaderChoices
from asyncvk.net._dispatch_profile import ProfilingExtractor


async def paired(
    d: Path, choice: str, values: list[Any], pairs: int, layer_types: tuple[str, ...]
) -> dict[str, Any]:
    in_name, out_name = blob_names(d)
    x = np.load(d / "input.npy")
    nets: list[Net] = []
    profilers: dict[int, ProfilingExtractor] = {}  # by the Net's index
    try:
        for value in values:
            net = Net(Option(shader_choices=ShaderChoices(**{choice: value})))
            await net.__aenter__()
            nets.append(net)
            await net.load_param(d / "model.param")
            await net.load_model(d / "model.bin")
            await net.background_builds()

        async def once(i: int) -> tuple[float, np.ndarray]:
            if layer_types:  # the device ms of those layers' dispatches
                if i not in profilers:
                    profilers[i] = await ProfilingExtractor(nets[i]).__aenter__()
                profiler = profilers[i]
                profiler.input(in_name, x)
                out = await profiler.extract(out_name)
                assert profiler.profile is not None
                dispatches = profiler.profile.dispatches
                return sum(t.gpu_ms for t in dispatches if t.layer_type in layer_types), out
            start = time.perf_counter()
            ex = nets[i].create_extractor()
            ex.input(in_name, x)
            out = await ex.extract(out_name)
            return (time.perf_counter() - start) * 1e3, out

        for i in range(len(nets)):  # plans recorded, first dispatches done
            await once(i)
            await once(i)
        times: list[list[float]] = [[] for _ in nets]
        outputs: list[np.ndarray] = [np.zeros(0)] * len(nets)
        for r in range(pairs):
            order = range(len(nets)) if r % 2 == 0 else reversed(range(len(nets)))
            for i in order:
                ms, outputs[i] = await once(i)
                times[i].append(ms)
    finally:
        for profiler in profilers.values():
            await profiler.__aexit__(None, None, None)
        for net in nets:
            await net.__aexit__(None, None, None)
    ratios = sorted(b / a for a, b in zip(times[0], times[-1], strict=True))
    return {
        "values": values,
        "min_ms": [round(min(t), 1) for t in times],
        "median_ms": [round(statistics.median(t), 1) for t in times],
        "pair_ratios": [round(r, 3) for r in ratios],
        "pair_ratio_median": round(statistics.median(ratios), 3),
        "max_abs_output_difference": float(np.abs(outputs[0] - outputs[-1]).max()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True, help="a model folder")
    parser.add_argument("--choice", required=True, help="a field of asyncvk.gpu.ShaderChoices")
    parser.add_argument("--values", default="[false, true]", help="JSON list, first = baseline")
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument(
        "--layer-types",
        default="",
        help="time only these layer types' dispatches (comma-separated)",
    )
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    values = json.loads(args.values)
    layer_types = tuple(t for t in args.layer_types.split(",") if t)
    result = asyncio.run(paired(args.model, args.choice, values, args.pairs, layer_types))
    report = {
        "device": get_gpu_info().device_name,
        "model": args.model.name,
        "choice": args.choice,
        "timed": f"device ms of {list(layer_types)}" if layer_types else "extraction wall ms",
        **result,
    }
    emit(report, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
