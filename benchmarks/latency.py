"""Warm inference latency, asyncvk against the ``ncnn`` wheel on the same device, side by side.

    python benchmarks/latency.py [--models a,b] [--loops 10] [--out FILE.json]

Each model is loaded once per runtime, run three times to warm up, then timed over ``--loops``
extractions (median, min, max in ms). asyncvk's shape-specialised plan is recorded on the first
run and replayed after, which is what "warm" means here.

Every runtime runs in its own fresh process: measured on the H100, asyncvk's MobileNetV2 took
2.5 ms alone but 6.4-8.6 ms in a process where the ncnn wheel had run first, so sharing a process
would measure the neighbour, not the runtime.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import MODELS, emit, model_names

from asyncvk import Net, Option, get_gpu_info
from asyncvk.layers import convolution


def _stats(times: list[float]) -> dict[str, float]:
    return {
        "median_ms": round(statistics.median(times) * 1000, 3),
        "min_ms": round(min(times) * 1000, 3),
        "max_ms": round(max(times) * 1000, 3),
    }


def ncnn_latency(d: Path, loops: int) -> dict[str, Any]:
    try:
        import ncnn
    except ImportError:
        return {"error": "ncnn wheel not installed"}
    net = ncnn.Net()
    net.opt.use_vulkan_compute = ncnn.get_gpu_count() > 0
    net.load_param(str(d / "model.param"))
    net.load_model(str(d / "model.bin"))
    # ncnn.Mat wraps the numpy buffer without holding a reference: keep the array alive
    x_host = np.ascontiguousarray(np.load(d / "input.npy"))
    x = ncnn.Mat(x_host)

    def once() -> float:
        t = time.perf_counter()
        ex = net.create_extractor()
        ex.input("in0", x)
        _, out = ex.extract("out0")
        np.array(out)
        return time.perf_counter() - t

    for _ in range(3):
        once()
    return _stats([once() for _ in range(loops)])


async def asyncvk_latency(d: Path, loops: int, fp16: bool) -> dict[str, Any]:
    async with Net(Option(use_fp16_storage=fp16)) as net:
        await net.load_param(d / "model.param")
        await net.load_model(d / "model.bin")
        x = np.load(d / "input.npy")

        async def once() -> float:
            t = time.perf_counter()
            ex = net.create_extractor()
            ex.input("in0", x)
            await ex.extract("out0")
            return time.perf_counter() - t

        for _ in range(3):
            await once()
        result: dict[str, Any] = _stats([await once() for _ in range(loops)])
        result["pipelines"] = net.cache.statistics().pipelines_created
    return result


VARIANTS = ("ncnn", "asyncvk", "asyncvk_fp16", "asyncvk_tiled_conv")


def measure_variant(variant: str, d: Path, loops: int) -> dict[str, Any]:
    """One runtime on one model, in this process (a child of ``main``)."""
    if variant == "ncnn":
        return ncnn_latency(d, loops)
    if variant == "asyncvk_tiled_conv":
        # the other convolution shader than this device type gets by default
        convolution.TILED_SHADER = "never" if get_gpu_info().is_cpu else "always"
    return asyncio.run(asyncvk_latency(d, loops, variant == "asyncvk_fp16"))


def _in_child(variant: str, d: Path, loops: int) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", variant, "--models", d.name, "--loops", str(loops)],
        capture_output=True,
        text=True,
    )
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(model_names()))
    parser.add_argument("--loops", type=int, default=10)
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--compare-conv",
        action="store_true",
        help="also time asyncvk with the other convolution shader (tiled / one output each)",
    )
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure_variant(args.child, MODELS / args.models, args.loops)))
        return 0
    info = get_gpu_info()
    variants = VARIANTS if args.compare_conv else VARIANTS[:3]
    rows = []
    for name in args.models.split(","):
        d = MODELS / name
        row: dict[str, Any] = {"model": name}
        for variant in variants:
            key = variant
            if variant == "asyncvk_tiled_conv":
                key = f"asyncvk_tiled_conv_{'never' if info.is_cpu else 'always'}"
            row[key] = _in_child(variant, d, args.loops)
        if "median_ms" in row["ncnn"] and "median_ms" in row["asyncvk"]:
            row["asyncvk_over_ncnn"] = round(
                row["asyncvk"]["median_ms"] / row["ncnn"]["median_ms"], 2
            )
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    report = {
        "device": info.device_name,
        "driver": f"{info.driver_name} {info.driver_info}",
        "cpu_count": os.cpu_count(),
        "loops": args.loops,
        "processes": "one fresh process per runtime and model",
        "models": rows,
    }
    emit(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
