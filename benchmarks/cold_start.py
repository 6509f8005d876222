"""Process start to first output, asyncvk's command line against the ``ncnn`` wheel, one run.

    python benchmarks/cold_start.py [--models squeezenet,rrdb] [--suite DIR] [--runs 5]
                                    [--variant NAME=SOURCE_ROOT ...]
                                    [--variant-env NAME:VAR=VALUE ...] [--out FILE.json]

The user's clock: each sample is a fresh process started by this script, timed from just before
it is spawned. The child notes ``time.monotonic()`` (one system-wide clock) the moment its first
output is in hand, so ``first_output_s`` = that moment - spawn, and ``wall_s`` = exit - spawn,
both read by this process; interpreter start-up, imports, GPU setup, loading, the first
inference, saving and teardown all count. asyncvk's own report of the same moment from the
kernel's process start time (``kernel_first_output_s``, one 10 ms clock tick coarse) is kept
beside it, with the in-process split.

* ``ncnn_cold``: ``import numpy, ncnn``; Net with ``use_vulkan_compute``, load_param, load_model,
  extract; first output = the output as a numpy array.
* ``asyncvk_cold``: ``python -m asyncvk run P B --input NAME=X.npy --output NAME --cache F
  --json`` with no file at F; first output = the extracted array.
* ``asyncvk_warm``: the same command again, loading the cache file the cold run saved.

Models: ``tests/models`` (``--models``) and, with ``--suite DIR``, the folders that
``benchmarks/suite_models.py`` made (ncnn's benchmark models with generated weights). Each
``--variant`` is a source root holding an ``asyncvk`` package (default: this checkout); several
compare versions in one run; ``--variant-env`` sets an environment variable for one variant's
processes (``--variant compiled=. --variant-env compiled:ASYNCVK_PACKAGED_SPIRV=0``: the same
code with the install's SPIR-V off). Medians over ``--runs``; driver disk caches are off
(MESA_SHADER_CACHE_DISABLE, __GL_SHADER_DISK_CACHE=0).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import MODELS, ROOT, child_env, emit, model_names

NCNN_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import numpy as np, ncnn
t_import = time.perf_counter()
param, model, inp, in_name, out_name = sys.argv[1:6]
x = np.load(inp)
net = ncnn.Net()
net.opt.use_vulkan_compute = ncnn.get_gpu_count() > 0
t1 = time.perf_counter(); net.load_param(param)
t2 = time.perf_counter(); net.load_model(model)
t3 = time.perf_counter()
ex = net.create_extractor(); ex.input(in_name, ncnn.Mat(np.ascontiguousarray(x)))
ret, out = ex.extract(out_name); y = np.array(out)
first_output = time.monotonic()
t4 = time.perf_counter()
print(json.dumps({"first_output_monotonic_s": first_output, "import_s": t_import - t0,
                  "load_param_s": t2 - t1, "load_model_s": t3 - t2, "infer_s": t4 - t3,
                  "extract_ret": ret, "checksum": float(y.sum())}))
"""

#: asyncvk report fields kept per sample (medians), beside the clock's
SPLIT = (
    "load_param_s",
    "gpu_setup_s",
    "cache_load_s",
    "load_model_s",
    "infer_s",
    "cache_save_s",
    "load_and_infer_s",
)
#: asyncvk report fields kept as they are (the last sample's)
SAMPLE_COUNTS = (
    "cache_loaded",
    "cache_saved",
    "pipelines_created",
    "spirv_compiled",
    "spirv_packaged",
)
CLOCK_MARKS = ("main", "compiler_ready", "imports_done", "device_opened", "first_output", "exit")


def _spawn(argv: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    """One fresh process, timed from just before its spawn; a failure is recorded, not raised."""
    with tempfile.TemporaryDirectory() as cwd:  # no checkout on sys.path[0]
        start = time.monotonic()
        try:
            out = subprocess.run(
                argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout} s"}
        wall = time.monotonic() - start
    if out.returncode != 0:
        lines = (out.stderr.strip() or out.stdout.strip() or "no output").splitlines()
        return {"error": lines[-1][:300], "wall_s": wall}
    report: dict[str, Any] = json.loads(out.stdout)
    sample: dict[str, Any] = {"wall_s": wall}
    clock = report.get("clock", {})
    mono = report.get("first_output_monotonic_s") or clock.get("first_output_monotonic_s")
    if mono is not None:
        sample["first_output_s"] = mono - start
    for mark in CLOCK_MARKS:
        value = clock.get(f"process_start_to_{mark}_s")
        if value is not None:
            sample[f"kernel_{mark}_s"] = value
    for key in (*SPLIT, "import_s"):
        if isinstance(report.get(key), (int, float)) and not isinstance(report[key], bool):
            sample[key] = report[key]
    for key in SAMPLE_COUNTS:
        if key in report:
            sample[key] = report[key]
    if "outputs" in report:
        sample["checksum"] = next(iter(report["outputs"].values()))["checksum"]
    elif "checksum" in report:
        sample["checksum"] = report["checksum"]
    return sample


def _summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {}
    keys = sorted({k for s in samples for k, v in s.items() if isinstance(v, float)})
    for key in keys:
        values = [s[key] for s in samples if key in s]
        row[key] = round(statistics.median(values), 4)
    for key in SAMPLE_COUNTS:
        if any(key in s for s in samples):
            row[key] = [s.get(key) for s in samples][-1]
    if "first_output_s" in row:
        row["first_output_runs_s"] = [
            round(s["first_output_s"], 4) for s in samples if "first_output_s" in s
        ]
    errors = [s["error"] for s in samples if "error" in s]
    if errors:
        row["errors"] = errors
    return row


def measure(
    folder: Path,
    runs: int,
    ncnn: bool,
    variants: dict[str, Path],
    timeout: float,
    python: str = sys.executable,
    variant_env: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    meta = json.loads((folder / "meta.json").read_text())
    param, model, inp = (str(folder / f) for f in ("model.param", "model.bin", "input.npy"))
    samples: dict[str, list[dict[str, Any]]] = {}
    base_env = child_env()
    for _ in range(runs):
        if ncnn:
            argv = [
                python,
                "-c",
                NCNN_CHILD,
                param,
                model,
                inp,
                meta["input"],
                meta["output"],
            ]
            samples.setdefault("ncnn_cold", []).append(_spawn(argv, base_env, timeout))
        for name, root in variants.items():
            env = dict(
                base_env,
                PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])),
                **(variant_env or {}).get(name, {}),
            )
            with tempfile.TemporaryDirectory() as tmp:
                argv = [
                    python, "-m", "asyncvk", "run", param, model,
                    "--input", f"{meta['input']}={inp}", "--output", meta["output"],
                    "--cache", str(Path(tmp) / "model.vkcache"), "--json",
                ]  # fmt: skip
                for phase in ("cold", "warm"):
                    samples.setdefault(f"{name}_{phase}", []).append(_spawn(argv, env, timeout))
    out: dict[str, Any] = {"model": folder.name}
    for label, rows in samples.items():
        out[label] = _summary(rows)
    ncnn_first = out.get("ncnn_cold", {}).get("first_output_s")
    for label, row in out.items():
        if label.startswith("ncnn") or not isinstance(row, dict):
            continue
        if ncnn_first and row.get("first_output_s"):
            row["speedup_vs_ncnn_cold"] = round(ncnn_first / row["first_output_s"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(model_names()), help="tests/models names")
    parser.add_argument("--suite", type=Path, default=None, help="suite_models.py's output")
    parser.add_argument("--suite-models", default="", help="comma-separated (default: all)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=SOURCE_ROOT")
    parser.add_argument("--variant-env", action="append", default=[], metavar="NAME:VAR=VALUE")
    parser.add_argument("--no-ncnn", action="store_true")
    parser.add_argument(
        "--python", default=sys.executable, help="the children's interpreter (default: this one)"
    )
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    variants = {"asyncvk": ROOT}
    if args.variant:
        variants = {}
        for spec in args.variant:
            name, _, root = spec.partition("=")
            variants[name] = Path(root).resolve()
    variant_env: dict[str, dict[str, str]] = {}
    for spec in args.variant_env:
        name, _, setting = spec.partition(":")
        var, _, value = setting.partition("=")
        if name not in variants or not var:
            parser.error(f"--variant-env {spec!r}: NAME:VAR=VALUE for a --variant NAME")
        variant_env.setdefault(name, {})[var] = value
    try:
        import ncnn  # noqa: F401

        have_ncnn = not args.no_ncnn
    except ImportError:
        have_ncnn = False
    from asyncvk.gpu import get_gpu_info

    info = get_gpu_info()
    folders = [MODELS / m for m in filter(None, args.models.split(","))]
    if args.suite is not None:
        wanted = set(filter(None, args.suite_models.split(",")))
        folders += [
            d
            for d in sorted(args.suite.iterdir())
            if (d / "meta.json").exists() and (not wanted or d.name in wanted)
        ]
    report: dict[str, Any] = {
        "device": info.device_name,
        "driver": f"{info.driver_name} {info.driver_info}",
        "cpu_count": os.cpu_count(),
        "python": args.python,
        "runs": args.runs,
        "ncnn": have_ncnn,
        "variants": {k: str(v) for k, v in variants.items()},
        "variant_env": variant_env,
        "models": [],
    }
    for folder in folders:
        row = measure(
            folder, args.runs, have_ncnn, variants, args.timeout, args.python, variant_env
        )
        report["models"].append(row)
        print(json.dumps(_brief(row)), file=sys.stderr, flush=True)
        if args.out:  # what is done so far survives a run cut short
            Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    emit(report, args.out)
    return 0


def _brief(row: dict[str, Any]) -> dict[str, Any]:
    """One line per model while the run goes on: first output and exit, per column."""
    brief: dict[str, Any] = {"model": row["model"]}
    for label, value in row.items():
        if isinstance(value, dict):
            brief[label] = [value.get("first_output_s"), value.get("wall_s")]
            if value.get("errors"):
                brief[label].append(value["errors"][-1][:120])
    return brief


if __name__ == "__main__":
    sys.exit(main())
