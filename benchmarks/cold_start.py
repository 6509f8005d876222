"""Process start to first output, asyncvk's command line against the ``ncnn`` wheel, one run.

    python benchmarks/cold_start.py [--models squeezenet,rrdb] [--suite DIR] [--runs 5]
                                    [--driver-cache off|on] [--variant NAME=SOURCE_ROOT ...]
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
code with the install's SPIR-V off). Medians over ``--runs``, with each case's first-output min
and max beside them.

``--driver-cache off`` (the default): the drivers' own disk shader caches are off
(MESA_SHADER_CACHE_DISABLE, __GL_SHADER_DISK_CACHE=0), so ``ncnn_cold`` is every start of ncnn.

``--driver-cache on``: the drivers' disk caches as users keep them, on (NVIDIA's default), each
runtime with its own folder, empty at each repetition's start (NVIDIA: __GL_SHADER_DISK_CACHE=1,
__GL_SHADER_DISK_CACHE_PATH, __GL_SHADER_DISK_CACHE_SKIP_CLEANUP=1; Mesa: MESA_SHADER_CACHE_DIR,
MESA_SHADER_CACHE_DISABLE unset). In order: ``ncnn_cold`` (a user's first start),
``ncnn_warm`` (the second, reading the driver cache the first wrote), then asyncvk's
``_cold`` and ``_warm`` as above, in their own driver cache folder. ``driver_cache_kib`` is that
folder's size after each start; each model's ``ratios`` holds ncnn_cold/asyncvk_cold and
ncnn_warm/asyncvk_warm (medians of first output). The report records the mode, the device, its
driver and the date.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
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
        return {"error": _scrub(lines[-1])[:300], "wall_s": wall}
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


def _scrub(text: str) -> str:
    """``text`` with this checkout's and the temporary folders' paths shortened: no machine
    paths in a report."""
    return text.replace(str(ROOT), ".").replace(tempfile.gettempdir(), "<tmp>")


def _folder_kib(folder: Path) -> float:
    """What a driver cache folder holds, in KiB."""
    total = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    return round(total / 1024, 1)


def driver_cache_env(base: dict[str, str], folder: Path) -> dict[str, str]:
    """``base`` with the drivers' disk shader caches on, in ``folder``: NVIDIA's and Mesa's."""
    env = dict(base)
    env.pop("MESA_SHADER_CACHE_DISABLE", None)
    env.update(
        __GL_SHADER_DISK_CACHE="1",
        __GL_SHADER_DISK_CACHE_PATH=str(folder),
        __GL_SHADER_DISK_CACHE_SKIP_CLEANUP="1",
        MESA_SHADER_CACHE_DIR=str(folder),
    )
    return env


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
        runs = [round(s["first_output_s"], 4) for s in samples if "first_output_s" in s]
        row["first_output_min_s"] = min(runs)
        row["first_output_max_s"] = max(runs)
        row["first_output_runs_s"] = runs
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
    driver_cache: bool = False,
) -> dict[str, Any]:
    """One model's samples over ``runs`` repetitions. With ``driver_cache``, each runtime starts
    each repetition with its own empty driver cache folder, kept over its two starts."""
    meta = json.loads((folder / "meta.json").read_text())
    param, model, inp = (str(folder / f) for f in ("model.param", "model.bin", "input.npy"))
    samples: dict[str, list[dict[str, Any]]] = {}
    base_env = child_env()

    def starts(label: str, argv: list[str], env: dict[str, str], phases: tuple[str, ...]) -> None:
        """``argv`` once per phase, in one fresh driver cache folder when that mode is on."""
        with tempfile.TemporaryDirectory(prefix="driver-cache-") as cache:
            if driver_cache:
                env = driver_cache_env(env, Path(cache))
            for phase in phases:
                sample = _spawn(argv, env, timeout)
                if driver_cache:
                    sample["driver_cache_kib"] = _folder_kib(Path(cache))
                samples.setdefault(f"{label}_{phase}", []).append(sample)

    for _ in range(runs):
        if ncnn:
            argv = [python, "-c", NCNN_CHILD, param, model, inp, meta["input"], meta["output"]]
            # the user's second start only differs from the first by the driver's cache
            starts("ncnn", argv, base_env, ("cold", "warm") if driver_cache else ("cold",))
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
                starts(name, argv, env, ("cold", "warm"))
    out: dict[str, Any] = {"model": folder.name}
    for label, rows in samples.items():
        out[label] = _summary(rows)
    ncnn_first = out.get("ncnn_cold", {}).get("first_output_s")
    ratios: dict[str, float] = {}
    for label, row in list(out.items()):
        if label.startswith("ncnn") or not isinstance(row, dict):
            continue
        if ncnn_first and row.get("first_output_s"):
            row["speedup_vs_ncnn_cold"] = round(ncnn_first / row["first_output_s"], 2)
        phase = label.rpartition("_")[2]
        ncnn_same = out.get(f"ncnn_{phase}", {}).get("first_output_s")
        if driver_cache and ncnn_same and row.get("first_output_s"):
            ratios[f"ncnn_{phase}/{label}"] = round(ncnn_same / row["first_output_s"], 2)
    if ratios:
        out["ratios"] = ratios
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(model_names()), help="tests/models names")
    parser.add_argument("--suite", type=Path, default=None, help="suite_models.py's output")
    parser.add_argument("--suite-models", default="", help="comma-separated (default: all)")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--driver-cache",
        choices=("off", "on"),
        default="off",
        help="the drivers' disk shader caches: off (default), or on as users keep them, "
        "each runtime starting twice from an empty one",
    )
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
    ncnn_version = None
    try:
        import ncnn

        have_ncnn = not args.no_ncnn
        ncnn_version = getattr(ncnn, "__version__", None) if have_ncnn else None
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
        "date": datetime.datetime.now(datetime.UTC).date().isoformat(),
        "driver_cache": args.driver_cache,
        "cpu_count": os.cpu_count(),
        "python": _python_version(args.python),
        "runs": args.runs,
        "ncnn": have_ncnn,
        "ncnn_version": ncnn_version,
        "variants": {k: _where(v) for k, v in variants.items()},
        "variant_env": variant_env,
        "models": [],
    }
    for folder in folders:
        row = measure(
            folder,
            args.runs,
            have_ncnn,
            variants,
            args.timeout,
            args.python,
            variant_env,
            driver_cache=args.driver_cache == "on",
        )
        report["models"].append(row)
        print(json.dumps(_brief(row)), file=sys.stderr, flush=True)
        if args.out:  # what is done so far survives a run cut short
            Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    emit(report, args.out)
    return 0


def _where(root: Path) -> str:
    """A variant's source root as the report names it: relative to this checkout, or its name."""
    try:
        return str(root.resolve().relative_to(ROOT)) or "."
    except ValueError:
        return root.name


def _python_version(python: str) -> str:
    """The children's interpreter by its version, not its path."""
    if python == sys.executable:
        return platform.python_version()
    out = subprocess.run(
        [python, "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() or Path(python).name


def _brief(row: dict[str, Any]) -> dict[str, Any]:
    """One line per model while the run goes on: first output and exit, per column."""
    brief: dict[str, Any] = {"model": row["model"]}
    for label, value in row.items():
        if label == "ratios":
            brief[label] = value
        elif isinstance(value, dict):
            brief[label] = [value.get("first_output_s"), value.get("wall_s")]
            if value.get("errors"):
                brief[label].append(value["errors"][-1][:120])
    return brief


if __name__ == "__main__":
    sys.exit(main())
