"""Where a cold load's time goes, per model: phases of ``load_model`` and each pipeline build.

    python benchmarks/load_profile.py [--models rrdb,shufflenetv2] [--runs 3] [--glsl-opt 0 2]
                                      [--out FILE.json]

Each run is a fresh process with no cache file (driver disk caches off). It reports GPU setup,
``load_param``, the ``load_model`` phases (reading weights, pipelines, upload), the first
inference and the median warm latency, plus every pipeline build from
``PipelineCache.build_log()``: when it was queued, its GLSL compile and its driver creation,
relative to the start of ``load_model``. ``critical_ms`` is when the last build finished.

``--glsl-opt`` runs the same models with shaderc's optimisation level 0 (none) and 2
(performance, what asyncvk uses), side by side: the level changes both how long GLSL takes
and what SPIR-V the driver compiles.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

from _common import MODELS, emit, model_names, run_child

CHILD = r"""
import asyncio, functools, json, statistics, sys, time
import numpy as np
import asyncvk.cache._spirv_entries as spirv_entries
from asyncvk.shader._compiler import OptimizationLevel, compile_glsl
from asyncvk.cli._runner import RunConfig, open_net

param, model, inp, level = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
spirv_entries.compile_glsl = functools.partial(compile_glsl, optimization=OptimizationLevel(level))

async def main():
    start = time.perf_counter()
    opened = await open_net(RunConfig(param, model))
    net, cache = opened.net, opened.cache
    x = np.load(inp)
    t0 = time.perf_counter()
    ex = net.create_extractor(); ex.input("in0", x); await ex.extract("out0")
    infer = time.perf_counter() - t0
    plan_build = sum(p.build_seconds for plans in net._plans.values() for p in plans)
    ttfr = time.perf_counter() - start
    lat = []
    for _ in range(10):
        t = time.perf_counter()
        ex = net.create_extractor(); ex.input("in0", x); await ex.extract("out0")
        lat.append(time.perf_counter() - t)
    s = net.load_stats
    model_start = start + opened.report["open_s"] - s.load_model_s
    builds = [
        {"shader": b.name, "queued_ms": 1e3 * (b.requested - model_start),
         "wait_ms": 1e3 * (b.started - b.requested), "glsl_ms": 1e3 * b.spirv_seconds,
         "create_ms": 1e3 * b.create_seconds, "end_ms": 1e3 * (b.finished - model_start)}
        for b in (cache.build_log() if cache else [])
    ]
    print(json.dumps({
        "ttfr_ms": 1e3 * ttfr, "gpu_setup_ms": 1e3 * opened.report.get("gpu_setup_s", 0),
        "load_param_ms": 1e3 * s.load_param_s, "load_model_ms": 1e3 * s.load_model_s,
        "read_weights_ms": 1e3 * s.read_weights_s, "pipelines_ms": 1e3 * s.pipelines_s,
        "upload_ms": 1e3 * s.upload_s, "infer_ms": 1e3 * infer, "plan_build_ms": 1e3 * plan_build,
        "latency_ms": 1e3 * statistics.median(lat),
        "critical_ms": max((b["end_ms"] for b in builds), default=0.0),
        "glsl_total_ms": sum(b["glsl_ms"] for b in builds),
        "create_total_ms": sum(b["create_ms"] for b in builds),
        "builds": builds,
    }))

asyncio.run(main())
"""


def _child(model: str, level: int) -> dict[str, Any]:
    folder = MODELS / model
    args = [str(folder / "model.param"), str(folder / "model.bin"), str(folder / "input.npy")]
    return run_child(CHILD, *args, str(level))


def measure(model: str, level: int, runs: int) -> dict[str, Any]:
    samples = [_child(model, level) for _ in range(runs)]
    keys = [k for k in samples[0] if k.endswith("_ms")]
    medians = {k: round(statistics.median(s[k] for s in samples), 2) for k in keys}
    # the builds of the median run by load_model time, slowest creation first
    mid = sorted(samples, key=lambda s: s["load_model_ms"])[len(samples) // 2]
    builds = sorted(mid["builds"], key=lambda b: -b["create_ms"])
    rounded = [
        {k: round(v, 2) if isinstance(v, float) else v for k, v in b.items()} for b in builds
    ]
    return {"model": model, "glsl_opt": level, "runs": runs, "median": medians, "builds": rounded}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(model_names()))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--glsl-opt", type=int, nargs="+", default=[2], choices=[0, 1, 2])
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    results = []
    for model in args.models.split(","):
        row = {level: measure(model, level, args.runs) for level in args.glsl_opt}
        for level, r in row.items():
            m = r["median"]
            print(
                f"{model:13s} O{level} load_model {m['load_model_ms']:7.1f} ms "
                f"(weights {m['read_weights_ms']:5.1f}, critical {m['critical_ms']:6.1f}, "
                f"glsl {m['glsl_total_ms']:6.1f}, create {m['create_total_ms']:6.1f}) "
                f"infer {m['infer_ms']:6.1f} (plan {m['plan_build_ms']:5.1f}) "
                f"latency {m['latency_ms']:6.2f} ms",
                file=sys.stderr,
            )
        results += row.values()
    report = {"runs": args.runs, "models": results}
    emit(report, args.out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
