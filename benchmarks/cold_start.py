"""Time to first result, asyncvk against the ``ncnn`` wheel, side by side in one run.

    python benchmarks/cold_start.py [--models squeezenet,rrdb] [--runs 3] [--out FILE.json]

For each test model, each number is the median over ``--runs`` fresh processes:

* ``ncnn_cold``: the ncnn wheel (its in-process pipeline cache only), Vulkan on the default GPU;
* ``asyncvk_cold``: no cache file;
* ``asyncvk_warm_file``: a fresh process loading the cache file the cold run saved;
* ``asyncvk_warm_process``: a second Net in the same process sharing the PipelineCache.

Time to first result = GPU/instance setup + load_param + load_model + first inference, measured
inside the process (interpreter start-up and imports are reported apart as ``process_s``).
Driver disk caches are disabled (MESA_SHADER_CACHE_DISABLE, __GL_SHADER_DISK_CACHE=0).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import MODELS, emit, model_names, run_child

NCNN_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np, ncnn
t_import = time.perf_counter()
param, model, inp = sys.argv[1:4]
x = np.load(inp)
start = time.perf_counter()
net = ncnn.Net()
net.opt.use_vulkan_compute = ncnn.get_gpu_count() > 0
t1 = time.perf_counter(); net.load_param(param)
t2 = time.perf_counter(); net.load_model(model)
t3 = time.perf_counter()
ex = net.create_extractor(); ex.input("in0", ncnn.Mat(np.ascontiguousarray(x)))
_, out = ex.extract("out0"); y = np.array(out)
t4 = time.perf_counter()
print(json.dumps({"import_s": t_import - t0, "load_param_s": t2 - t1, "load_model_s": t3 - t2,
                  "infer_s": t4 - t3, "ttfr_s": t4 - start, "checksum": float(y.sum())}))
"""

ASYNCVK_CHILD = r"""
import asyncio, json, sys, time
t0 = time.perf_counter()
import numpy as np
from asyncvk._runner import RunConfig, open_net, close_net, cache_counters
t_import = time.perf_counter()
param, model, inp, cache, mode = sys.argv[1:6]

async def once(cfg):
    start = time.perf_counter()
    opened = await open_net(cfg)
    t_infer = time.perf_counter()
    ex = opened.net.create_extractor(); ex.input("in0", np.load(inp))
    y = await ex.extract("out0")
    ttfr = time.perf_counter() - start
    infer = time.perf_counter() - t_infer
    t2 = time.perf_counter()
    ex = opened.net.create_extractor(); ex.input("in0", np.load(inp)); await ex.extract("out0")
    r = dict(opened.report); r.update(cache_counters(opened))
    r.update(ttfr_s=ttfr, infer_s=infer, second_infer_s=time.perf_counter() - t2,
             checksum=float(y.sum()))
    return opened, r

async def main():
    cfg = RunConfig(param, model, cache_file=cache if cache != "-" else None)
    opened, report = await once(cfg)
    if mode == "process":
        # a second Net sharing the live PipelineCache: the in-process warm start
        from asyncvk.net._option import Option
        from asyncvk.net._net import Net
        start = time.perf_counter()
        net = Net(Option(pipeline_cache=opened.cache))
        await net.load_param(param); await net.load_model(model)
        ex = net.create_extractor(); ex.input("in0", np.load(inp)); await ex.extract("out0")
        report = dict(report, ttfr_s=time.perf_counter() - start,
                      pipelines_created_second=opened.cache.statistics().pipelines_created)
        await net.aclose()
    report.update(await close_net(opened, save=cache != "-"))
    report["import_s"] = t_import - t0
    print(json.dumps(report, default=str))

asyncio.run(main())
"""


def _child(code: str, args: list[str]) -> dict[str, Any]:
    """One fresh process; a failure is recorded in the report, not raised."""
    start = time.perf_counter()
    try:
        result = run_child(code, *args)
    except RuntimeError as exc:
        return {"error": str(exc).strip().splitlines()[-1]}
    result["process_s"] = time.perf_counter() - start
    return result


def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if key in r]
    return round(statistics.median(values), 4) if values else None


def measure(name: str, runs: int, ncnn: bool) -> dict[str, Any]:
    d = MODELS / name
    args = [str(d / "model.param"), str(d / "model.bin"), str(d / "input.npy")]
    out: dict[str, Any] = {"model": name}
    results: dict[str, list[dict[str, Any]]] = {
        "ncnn_cold": [],
        "asyncvk_cold": [],
        "asyncvk_warm_file": [],
        "asyncvk_warm_process": [],
    }
    for _ in range(runs):
        if ncnn:
            results["ncnn_cold"].append(_child(NCNN_CHILD, args))
        with tempfile.TemporaryDirectory() as tmp:
            cache = str(Path(tmp) / "model.vkcache")
            results["asyncvk_cold"].append(_child(ASYNCVK_CHILD, [*args, cache, "cold"]))
            results["asyncvk_warm_file"].append(_child(ASYNCVK_CHILD, [*args, cache, "file"]))
        results["asyncvk_warm_process"].append(_child(ASYNCVK_CHILD, [*args, "-", "process"]))
    for label, rs in results.items():
        if not rs:
            continue
        errors = [r["error"] for r in rs if "error" in r]
        row = {
            k: _median(rs, k)
            for k in (
                "ttfr_s",
                "gpu_setup_s",
                "cache_load_s",
                "load_param_s",
                "load_model_s",
                "infer_s",
                "second_infer_s",
                "import_s",
                "process_s",
            )
        }
        for k in (
            "pipelines_created",
            "spirv_compiled",
            "spirv_cache_hits",
            "cache_loaded",
            "pipelines_requested",
            "gpu_layers",
            "cpu_layers",
        ):
            if rs and k in rs[-1]:
                row[k] = rs[-1][k]
        if errors:
            row["errors"] = errors
        out[label] = row
    cold = out.get("ncnn_cold", {}).get("ttfr_s")
    for label in ("asyncvk_cold", "asyncvk_warm_file", "asyncvk_warm_process"):
        ours = out[label].get("ttfr_s")
        if cold and ours:
            out[label]["speedup_vs_ncnn_cold"] = round(cold / ours, 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(model_names()))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-ncnn", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    try:
        import ncnn  # noqa: F401

        have_ncnn = not args.no_ncnn
    except ImportError:
        have_ncnn = False
    from asyncvk.gpu import get_gpu_info

    info = get_gpu_info()
    report = {
        "device": info.device_name,
        "driver": f"{info.driver_name} {info.driver_info}",
        "cpu_count": os.cpu_count(),
        "runs": args.runs,
        "ncnn": have_ncnn,
        "models": [measure(m, args.runs, have_ncnn) for m in args.models.split(",")],
    }
    emit(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
