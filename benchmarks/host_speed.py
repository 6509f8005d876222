"""How fast a fresh process's host CPU runs fixed work, with no model and no GPU: the yardstick
for the spread of latency medians across processes.

    python benchmarks/host_speed.py [--processes 8] [--pin] [--out FILE.json]

Each child times three pieces of work that do not change between processes (median of many
repeats each): the detection layers' C NMS over 1500 seeded boxes, a pure-Python loop and a
numpy ``exp`` over 1M floats. If these differ between processes as much as a model's latency
does, the spread is the machine's, not the runtime's. ``--pin`` also runs one child pinned to
each core in turn (``os.sched_setaffinity``), which tells a slow core from a slow moment.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from _common import emit


def _median_ms(work: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        work()
        times.append((time.perf_counter() - t) * 1000)
    return round(statistics.median(times), 4)


def _python_loop() -> int:
    total = 0
    for i in range(100_000):
        total += i * i
    return total


def measure_python_loop(repeats: int = 30) -> float:
    """Median ms of a pure-Python loop: no library, no memory traffic, only the core's speed."""
    return _median_ms(_python_loop, repeats)


def measure() -> dict[str, Any]:
    """The three pieces of work in this process."""
    import numpy as np

    from asyncvk.layers import _detect_ext

    rng = np.random.default_rng(7)
    centres = rng.uniform(0, 1, (1500, 2)).astype(np.float32)
    sizes = np.exp(rng.normal(-2.5, 0.7, (1500, 2))).astype(np.float32)
    boxes = np.concatenate([centres - sizes / 2, centres + sizes / 2], 1)
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    floats = rng.standard_normal(1 << 20).astype(np.float32)

    return {
        "nms_ms": _median_ms(lambda: _detect_ext.nms(boxes, areas, 0.45, False), 200),
        "python_loop_ms": measure_python_loop(),
        "numpy_exp_ms": _median_ms(lambda: np.exp(floats), 50),
        "cores": len(os.sched_getaffinity(0)),
    }


def _child(core: int | None) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child"] + ([] if core is None else ["--core", str(core)])
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return {"error": "timed out after 120 s"}
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    row: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return row


def _spread(rows: list[dict[str, Any]], key: str) -> dict[str, float]:
    values = [r[key] for r in rows if key in r]
    return {
        "min": min(values),
        "max": max(values),
        "spread": round((max(values) - min(values)) / min(values), 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=8, help="unpinned fresh processes")
    parser.add_argument("--pin", action="store_true", help="also one process pinned per core")
    parser.add_argument("--out", default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--core", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        if args.core is not None:
            os.sched_setaffinity(0, {args.core})
        print(json.dumps(measure()))
        return 0
    free = [_child(None) for _ in range(args.processes)]
    report: dict[str, Any] = {"cpu_count": os.cpu_count(), "unpinned": free}
    if args.pin:
        report["pinned"] = {core: _child(core) for core in sorted(os.sched_getaffinity(0))}
    rows = free + list(report.get("pinned", {}).values())
    keys = ("nms_ms", "python_loop_ms", "numpy_exp_ms")
    report["summary"] = {k: _spread(rows, k) for k in keys if any(k in r for r in rows)}
    errors = [r["error"] for r in rows if "error" in r]
    if errors:
        report["errors"] = errors
    emit(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
