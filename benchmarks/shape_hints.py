"""Shape hints: generic pipelines against shape-baked ones (``Option.use_shape_hints``).

    python benchmarks/shape_hints.py [--models a,b] [--loops 20] [--out FILE.json]

For each model in ``tests/models``, a hinted ``.param`` is written to a temporary folder by the
``asyncvk shapehint`` code for the model's own input shape. Two Nets are then loaded in one
process, each with its own PipelineCache (the device is opened and the GLSL compiler's one-time
set-up paid first, outside the timings, so the Net loaded first is not charged for them): the
plain file without the option ("generic"), and the hinted file with it ("hinted"). Reported:
pipelines created, load_model seconds, and warm latency (3 warm-up runs each, then ``--loops``
timed runs, alternating between the two Nets so drift affects both alike), with the ratios
hinted / generic. Set MESA_SHADER_CACHE_DISABLE=true to keep Mesa's disk cache out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import MODELS, emit, model_names

from asyncvk import Net, Option, get_gpu_info
from asyncvk.gpu import get_gpu_device
from asyncvk.net._param_parser import parse_param
from asyncvk.net._shape_hints import infer_shapes, write_hints
from asyncvk.shader import compile_glsl

WARMUP = 3


async def _load(param: Path, model: Path, hints: bool) -> tuple[Net, dict[str, Any]]:
    net = Net(Option(use_vulkan_compute=True, use_shape_hints=hints))
    await net.load_param(param)
    start = time.perf_counter()
    await net.load_model(model)
    load_s = time.perf_counter() - start
    stats = net.cache.statistics()
    return net, {
        "pipelines_created": stats.pipelines_created,
        "shape_baked_requested": net.load_stats.shape_baked_pipelines,
        "spirv_compiled": stats.spirv_compiles,
        "load_model_s": round(load_s, 4),
    }


async def _once(net: Net, name: str, x: np.ndarray) -> float:
    ex = net.create_extractor()
    ex.input(name, x)
    start = time.perf_counter()
    await ex.extract(net.output_names[-1])
    return time.perf_counter() - start


async def compare(d: Path, loops: int, tmp: Path) -> dict[str, Any]:
    meta = json.loads((d / "meta.json").read_text())
    name, shape = meta["input"], tuple(meta["input_shape"])
    hinted = tmp / f"{d.name}.param"
    text, layers = write_hints(
        (d / "model.param").read_text(),
        infer_shapes(parse_param(d / "model.param"), {name: shape}),
    )
    hinted.write_text(text)
    x = np.load(d / "input.npy")
    nets: dict[str, Net] = {}
    row: dict[str, Any] = {"model": d.name, "input_shape": list(shape), "layers_hinted": layers}
    try:
        for mode, param, hints in (
            ("generic", d / "model.param", False),
            ("hinted", hinted, True),
        ):
            nets[mode], row[mode] = await _load(param, d / "model.bin", hints)
        outputs = {}
        for mode, net in nets.items():
            ex = net.create_extractor()
            ex.input(name, x)
            outputs[mode] = await ex.extract(net.output_names[-1])
            for _ in range(WARMUP - 1):
                await _once(net, name, x)
            row[mode]["baked_dispatches"] = sum(
                p.baked_dispatches for ps in net._plans.values() for p in ps
            )
        times: dict[str, list[float]] = {mode: [] for mode in nets}
        for _ in range(loops):
            for mode, net in nets.items():
                times[mode].append(await _once(net, name, x))
        for mode in nets:
            row[mode]["median_ms"] = round(statistics.median(times[mode]) * 1000, 3)
            row[mode]["min_ms"] = round(min(times[mode]) * 1000, 3)
        row["max_abs_diff"] = float(np.abs(outputs["hinted"] - outputs["generic"]).max())
    finally:
        for net in nets.values():
            await net.aclose()
    g, h = row["generic"], row["hinted"]
    row["hinted_over_generic"] = {
        key: round(h[key] / g[key], 3) for key in ("median_ms", "min_ms", "load_model_s")
    }
    row["hinted_over_generic"]["pipelines_created"] = round(
        h["pipelines_created"] / g["pipelines_created"], 3
    )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(model_names()))
    parser.add_argument("--loops", type=int, default=20)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    get_gpu_device()  # open the device before any timing
    compile_glsl("#version 450\nlayout(local_size_x = 1) in;\nvoid main() {}\n")  # set-up
    info = get_gpu_info()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            row = asyncio.run(compare(MODELS / name, args.loops, Path(tmp)))
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    report = {
        "device": info.device_name,
        "driver": f"{info.driver_name} {info.driver_info}",
        "cpu_count": os.cpu_count(),
        "mesa_shader_cache_disable": os.environ.get("MESA_SHADER_CACHE_DISABLE"),
        "loops": args.loops,
        "warmup": WARMUP,
        "models": rows,
    }
    emit(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
