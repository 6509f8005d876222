"""The first inferences after a cold load, asyncvk against the ``ncnn`` wheel, side by side.

    python benchmarks/first_inferences.py [--models a,b] [--suite DIR [--suite-models a,b]]
                                          [--count 20] [--processes 3] [--out FILE.json]

What a user of a freshly started process feels: each runtime, in a fresh process of its own
(the drivers' disk caches off), loads the model cold (asyncvk with no cache file, taking the
SPIR-V the install compiled; ncnn as its wheel does) and at once times each of its first
``--count`` inferences, the first included (asyncvk records its plan there; pipelines still
building in the background are not waited for: the first inferences run on what is built).
Reported per runtime: every inference's milliseconds (median over the processes, inference by
inference), the first's, the median of the rest, and the sum; and asyncvk's sum over ncnn's.
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
from _common import blob_names, child_env, emit, model_folders, model_names

RUNTIMES = ("ncnn", "asyncvk")


def ncnn_first(d: Path, count: int) -> list[float]:
    import ncnn

    in_name, out_name = blob_names(d)
    net = ncnn.Net()
    net.opt.use_vulkan_compute = ncnn.get_gpu_count() > 0
    net.load_param(str(d / "model.param"))
    net.load_model(str(d / "model.bin"))
    x_host = np.ascontiguousarray(np.load(d / "input.npy"))  # alive while ncnn reads it
    times = []
    for _ in range(count):
        t = time.perf_counter()
        ex = net.create_extractor()
        ex.input(in_name, ncnn.Mat(x_host))
        ret, out = ex.extract(out_name)
        np.array(out)
        times.append(time.perf_counter() - t)
        if ret != 0:
            raise RuntimeError(f"{d}: ncnn extract({out_name!r}) returned {ret}")
    return times


async def asyncvk_first(d: Path, count: int) -> list[float]:
    from asyncvk import Net

    in_name, out_name = blob_names(d)
    x = np.load(d / "input.npy")
    times = []
    log = _debug_log() if TIMELINE is not None else None
    async with Net() as net:
        await net.load_param(d / "model.param")
        load_starts = time.perf_counter()
        await net.load_model(d / "model.bin")
        loaded = time.perf_counter()
        model = net.gpu_model
        if model is not None and model.background is not None:  # when the last was adopted
            model.background.add_done_callback(
                lambda _: ADOPTED.append(time.perf_counter() - loaded)
            )
        for _ in range(count):
            t = time.perf_counter()
            ex = net.create_extractor()
            ex.input(in_name, x)
            await ex.extract(out_name)
            times.append(time.perf_counter() - t)
            VERSIONS.append(model.pipelines_version if model is not None else 0)
            if TIMELINE is not None:
                TIMELINE.append(("inference", t - loaded, time.perf_counter() - loaded))
        del ADOPTED[1:]  # only one taken before the inferences end counts
        ADOPTED.append(time.perf_counter() - loaded)
        if TIMELINE is not None and net.cache is not None and log is not None:
            TIMELINE.append(("load", load_starts - loaded, 0.0))
            for b in net.cache.counters.build_log():
                TIMELINE.append((f"build {b.name}", b.requested - loaded, b.finished - loaded))
            TIMELINE.extend(("log " + m, at - loaded, at - loaded) for at, m in log)
    return times


def _debug_log() -> list[tuple[float, str]]:
    """asyncvk's debug records from now on, each with its time on the perf_counter clock."""
    import logging

    records: list[tuple[float, str]] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append((time.perf_counter(), record.getMessage()[:160]))

    logger = logging.getLogger("asyncvk")
    logger.setLevel(logging.DEBUG)
    logger.addHandler(Keep())
    return records


#: asyncvk's model: the pipelines version after each inference, and the seconds from the end
#: of the load to the last background pipeline's adoption (if within the inferences)
VERSIONS: list[int] = []
ADOPTED: list[float] = []
#: with --timeline: (what, from, to) in seconds from the end of the load: each inference, each
#: pipeline build (asked for, finished), asyncvk's debug log
TIMELINE: list[tuple[str, float, float]] | None = None


def _child(runtime: str, d: Path, count: int) -> list[float]:
    if runtime == "ncnn":
        return ncnn_first(d, count)
    return asyncio.run(asyncvk_first(d, count))


def _in_process(
    runtime: str, d: Path, count: int, timeout: float, timeline: bool = False
) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child", runtime, "--child-dir", str(d)]
    argv += ["--timeline"] if timeline else []
    try:
        out = subprocess.run(
            [*argv, "--count", str(count)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=child_env(),
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if out.returncode != 0:
        lines = (out.stderr.strip() or "failed").splitlines()
        return {"error": lines[-1][:300]}
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Inference by inference, the median over the processes; then the first, the rest's
    median and the sum of those medians."""
    good = [r["ms"] for r in runs if "ms" in r]
    errors = [r["error"] for r in runs if "error" in r]
    if not good:
        return {"error": errors[-1] if errors else "no process reported"}
    per = [round(statistics.median(step), 3) for step in zip(*good, strict=True)]
    result: dict[str, Any] = {
        "ms": per,
        "first_ms": per[0],
        "rest_median_ms": round(statistics.median(per[1:]), 3) if len(per) > 1 else None,
        "sum_ms": round(sum(per), 3),
        "processes": len(good),
    }
    for key in ("pipelines_versions", "all_adopted_ms", "timeline_ms"):  # the first process's
        if key in runs[0]:
            result[key] = runs[0][key]
    if errors:
        result["errors"] = errors
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(model_names()), help="tests/models names")
    parser.add_argument("--suite", type=Path, default=None, help="suite_models.py's output")
    parser.add_argument("--suite-models", default="", help="comma-separated (default: all)")
    parser.add_argument("--count", type=int, default=20, help="inferences timed after the load")
    parser.add_argument("--processes", type=int, default=3, help="fresh processes per runtime")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per process")
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--timeline",
        action="store_true",
        help="asyncvk's first process also reports when each inference, pipeline build and "
        "debug log line came (ms from the end of the load)",
    )
    parser.add_argument("--child", choices=RUNTIMES, help=argparse.SUPPRESS)
    parser.add_argument("--child-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        global TIMELINE
        TIMELINE = [] if args.timeline else None
        ms = [round(t * 1000, 3) for t in _child(args.child, args.child_dir, args.count)]
        extra: dict[str, Any] = {"pipelines_versions": VERSIONS} if VERSIONS else {}
        if TIMELINE:
            extra["timeline_ms"] = [
                (what, round(a * 1000, 2), round(b * 1000, 2))
                for what, a, b in sorted(TIMELINE, key=lambda e: e[1])
            ]
        if len(ADOPTED) == 2:  # the adoption, then the end of the inferences
            extra["all_adopted_ms"] = round(ADOPTED[0] * 1000, 1)
        print(json.dumps({"ms": ms, **extra}))
        return 0
    if args.count < 1 or args.processes < 1:
        parser.error("--count and --processes must be at least 1")
    from asyncvk import get_gpu_info

    info = get_gpu_info()
    report: dict[str, Any] = {
        "device": info.device_name,
        "driver": f"{info.driver_name} {info.driver_info}",
        "cpu_count": os.cpu_count(),
        "count": args.count,
        "processes": args.processes,
        "driver_cache": "off",
        "how": "a fresh process per runtime, model and repeat, one after another in turn",
        "models": [],
    }
    for source, d in model_folders(args.models, args.suite, args.suite_models):
        runs: dict[str, list[dict[str, Any]]] = {r: [] for r in RUNTIMES}
        for p in range(args.processes):
            for runtime in RUNTIMES:
                timeline = args.timeline and p == 0 and runtime == "asyncvk"
                runs[runtime].append(_in_process(runtime, d, args.count, args.timeout, timeline))
        row: dict[str, Any] = {"model": d.name, "source": source}
        row.update({runtime: summary(runs[runtime]) for runtime in RUNTIMES})
        ours, theirs = row["asyncvk"].get("sum_ms"), row["ncnn"].get("sum_ms")
        if ours and theirs:
            row["asyncvk_sum_over_ncnn"] = round(ours / theirs, 2)
        report["models"].append(row)
        brief = {
            k: v.get("sum_ms", v.get("error")) if isinstance(v, dict) else v for k, v in row.items()
        }
        print(json.dumps(brief), file=sys.stderr, flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    emit(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
