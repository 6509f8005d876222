"""Cold ``load_model`` time against the number of compile threads, in fresh processes.

    python benchmarks/compile_threads.py [--models a,b] [--runs 3] [--out FILE.json]

Threads run 1, 2, 4, ... up to the CPU count; each point is the median over ``--runs`` fresh
processes with no cache file and driver disk caches off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from _common import MODELS, child_env, emit, model_names


def load_model_s(model: Path, threads: int) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "asyncvk",
        "run",
        str(model / "model.param"),
        str(model / "model.bin"),
        "--input",
        f"in0={model / 'input.npy'}",
        "--compile-threads",
        str(threads),
        "--json",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=600)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip()[-300:]}
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(model_names()))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    cpus = os.cpu_count() or 1
    threads = [1]
    while threads[-1] * 2 <= cpus:
        threads.append(threads[-1] * 2)
    rows = []
    for name in args.models.split(","):
        row: dict[str, Any] = {"model": name}
        for t in threads:
            reports = [load_model_s(MODELS / name, t) for _ in range(args.runs)]
            ok = [r for r in reports if "load_model_s" in r]
            row[f"threads_{t}"] = {
                "load_model_s": round(statistics.median(r["load_model_s"] for r in ok), 4)
                if ok
                else None,
                "pipelines_created": ok[-1]["pipelines_created"] if ok else None,
                "errors": [r["error"] for r in reports if "error" in r],
            }
        base = row["threads_1"]["load_model_s"]
        top = row[f"threads_{threads[-1]}"]["load_model_s"]
        if base and top:
            row["speedup"] = round(base / top, 2)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    device = ok[-1]["device"] if rows and ok else {}
    report = {"device": device, "cpu_count": cpus, "threads": threads, "models": rows}
    emit(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
