"""ncnn's benchmark models on asyncvk's GPU path against the ncnn wheel (CPU fp32): rel L2 per
compared blob, the layer types that ran on the CPU, and seconds per step, one JSON row a model.

    python benchmarks/suite_accuracy.py [--native] [--models a,b] [--out FILE.json]

The same run as ``tests/test_ncnn_suite.py`` (``tests/ncnn_suite.py``: weights, inputs, the
comparison), for the figures rather than a pass/fail. Each model runs in its own process, so
a crash or a hang (``--timeout``) costs that row only; weights go to a temporary folder and are
deleted after each model. Without ``--native``, models that take any input size run at the
smaller ``CI_SIZES``, as in CI. The report also records the machine's load average at start
and end: on a shared machine the seconds say little without it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import ROOT, child_env, emit

TESTS = ROOT / "tests"

CHILD = r"""
import asyncio, json, math, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import ncnn_suite
param, folder, native = Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4] == "1"
missing = ncnn_suite.missing_types(ncnn_suite.parse_param(param))
if missing:
    print(json.dumps({"model": param.stem, "missing_types": missing}))
    sys.exit(0)
r = asyncio.run(ncnn_suite.compare_with_ncnn(param, folder, native))
rel = {b: (v if math.isfinite(v) else None) for b, v in r.rel_l2.items()}
print(json.dumps({
    "model": r.name, "input_shape": list(r.input_shape), "bin_bytes": r.bin_bytes,
    "rel_l2": rel, "max_rel_l2": max(rel.values(), key=lambda v: math.inf if v is None else v),
    "rel_l2_detections_in_order": {b: (v if math.isfinite(v) else None)
                                   for b, v in r.rel_l2_in_order.items()},
    "problems": r.problems, "cpu_types": sorted(r.cpu_types),
    "unexpected_cpu_types": sorted(r.cpu_types - ncnn_suite.CPU_ALLOWED),
    "seconds": r.seconds,
}))
"""


def run_model(param: Path, native: bool, timeout: float) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="suite_accuracy_") as folder:
        args = [str(TESTS), str(param), folder, "1" if native else "0"]
        start = time.perf_counter()
        try:
            out = subprocess.run(
                [sys.executable, "-c", CHILD, *args],
                capture_output=True,
                text=True,
                env=child_env(),
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return {"model": param.stem, "error": f"timed out after {timeout:.0f} s"}
        wall = time.perf_counter() - start
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        tail = out.stderr.strip().splitlines()[-3:]
        return {"model": param.stem, "error": f"exit {out.returncode}: {' | '.join(tail)}"}
    row: dict[str, Any] = json.loads(lines[-1])
    row["process_s"] = wall
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--native", action="store_true", help="benchncnn's input sizes")
    parser.add_argument("--models", default="", help="comma-separated stems (default: all)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per model")
    parser.add_argument("--out", help="also write the report here")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(TESTS))
    from ncnn_suite import suite_params

    from asyncvk.gpu import get_gpu_info

    info = get_gpu_info()
    wanted = set(filter(None, args.models.split(",")))
    rows = []
    load_start = os.getloadavg()
    for param in suite_params():
        if not wanted or param.stem in wanted:
            rows.append(run_model(param, args.native, args.timeout))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    report = {
        "what": "rel L2 of asyncvk GPU (Option defaults, fp32) vs ncnn wheel CPU fp32",
        "device": info.device_name,
        "driver": f"{info.driver_name} {info.driver_info}",
        "native_sizes": args.native,
        "cpus": os.cpu_count(),
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "models": rows,
    }
    emit(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
