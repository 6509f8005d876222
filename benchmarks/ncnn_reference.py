"""Reference timings of the ``ncnn`` wheel on one test model, each measurement in a fresh process.

    python benchmarks/ncnn_reference.py tests/models/rrdb [--vulkan | --cpu] [--device N]
        [--variant model_fp32] [--loops 20] [--runs 1] [--threads T] [--fp32]

Prints one JSON object. For other benchmarks::

    sys.path.insert(0, "benchmarks"); from ncnn_reference import measure
    row = measure("tests/models/rrdb", vulkan=True, device=0, loops=20)

Each run is a new Python process (``sys.executable``), with driver disk caches off
(``MESA_SHADER_CACHE_DISABLE=true``, ``__GL_SHADER_DISK_CACHE=0``) so the cold numbers are
cold. Inside the child, with ``time.perf_counter``:

* ``import_s``: ``import ncnn`` (and numpy), apart from the rest;
* ``gpu_instance_s``: ``ncnn.get_gpu_count()``, which creates ncnn's Vulkan instance and
  devices (Vulkan only; 0 on the CPU path);
* ``load_param_s``, ``load_model_s`` (on Vulkan this is where ncnn compiles its pipelines and
  uploads the weights), ``first_infer_s`` (extractor, input, extract, copy-out of the output);
* ``ttfr_s`` = ``load_param_s + load_model_s + first_infer_s``; ``ttfr_with_instance_s`` adds
  ``gpu_instance_s``;
* ``warm_median_ms`` / ``warm_min_ms`` / ``warm_mean_ms`` over ``--loops`` further inferences,
  each a new extractor + input + extract + copy-out, as ncnn's own benchmarks do;
* ``rel_l2``: the first result against ``output.npy``, to show the run computed the right thing.

With ``--runs R`` > 1 the top-level numbers are medians over the R processes and ``runs`` lists
each. Never fails: a missing ``ncnn`` wheel, no Vulkan device, a crash or a timeout of the child
give an object with an ``error`` field, and exit status 0.
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

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "models"

CHILD = r"""
import json, statistics, sys, time
t0 = time.perf_counter()
try:
    import numpy as np
    import ncnn
except Exception as e:
    print(json.dumps({"error": f"ncnn wheel not importable: {e!r}"}))
    sys.exit(0)
t_import = time.perf_counter()
a = json.loads(sys.argv[1])
res = {"import_s": t_import - t0}
if a["vulkan"]:
    t = time.perf_counter()
    gpus = ncnn.get_gpu_count()
    res["gpu_instance_s"] = time.perf_counter() - t
    if a["device"] >= gpus:
        print(json.dumps({"error": f"Vulkan device {a['device']} asked, ncnn sees {gpus}"}))
        sys.exit(0)
    res["device_name"] = ncnn.get_gpu_info(a["device"]).device_name()
else:
    res["gpu_instance_s"] = 0.0
x = np.ascontiguousarray(np.load(a["input"]))
net = ncnn.Net()
net.opt.use_vulkan_compute = a["vulkan"]
if a["threads"]:
    net.opt.num_threads = a["threads"]
if a["fp32"]:
    for f in ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic",
              "use_bf16_packed", "use_bf16_storage"):
        setattr(net.opt, f, False)
if a["vulkan"]:
    net.set_vulkan_device(a["device"])
res["num_threads"] = net.opt.num_threads
t1 = time.perf_counter(); r1 = net.load_param(a["param"])
t2 = time.perf_counter(); r2 = net.load_model(a["bin"])
t3 = time.perf_counter()
if r1 or r2:
    print(json.dumps({"error": f"load_param returned {r1}, load_model returned {r2}"}))
    sys.exit(0)

def infer():
    ex = net.create_extractor()
    ex.input(a["in"], ncnn.Mat(x))
    ret, out = ex.extract(a["out"])
    if ret != 0:
        raise RuntimeError(f"extract returned {ret}")
    return np.array(out)

y = infer()
t4 = time.perf_counter()
res.update(load_param_s=t2 - t1, load_model_s=t3 - t2, first_infer_s=t4 - t3, ttfr_s=t4 - t1)
res["ttfr_with_instance_s"] = res["ttfr_s"] + res["gpu_instance_s"]
ref = np.load(a["output"]) if a["output"] else None
if ref is not None and ref.size == y.size:
    y = y.reshape(ref.shape)
    res["rel_l2"] = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
times = []
for _ in range(a["loops"]):
    t = time.perf_counter(); infer(); times.append(time.perf_counter() - t)
if times:
    res["warm_median_ms"] = 1e3 * statistics.median(times)
    res["warm_min_ms"] = 1e3 * min(times)
    res["warm_mean_ms"] = 1e3 * sum(times) / len(times)
res["process_s"] = time.perf_counter() - t0
print(json.dumps(res))
"""

# Numbers taken as medians across runs; the rest comes from the first run.
_NUMERIC = (
    "import_s",
    "gpu_instance_s",
    "load_param_s",
    "load_model_s",
    "first_infer_s",
    "ttfr_s",
    "ttfr_with_instance_s",
    "warm_median_ms",
    "warm_min_ms",
    "warm_mean_ms",
    "process_s",
)


def resolve_model_dir(model: str | Path) -> Path:
    """A model folder, or the name of one under ``tests/models``."""
    p = Path(model)
    if not p.is_dir() and (MODELS / str(model)).is_dir():
        p = MODELS / str(model)
    return p


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(MESA_SHADER_CACHE_DISABLE="true", __GL_SHADER_DISK_CACHE="0", PYTHONUNBUFFERED="1")
    return env


def measure_once(
    model_dir: str | Path,
    *,
    vulkan: bool = True,
    device: int = 0,
    loops: int = 20,
    variant: str = "model",
    threads: int = 0,
    fp32: bool = False,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """One fresh process: load, first inference and ``loops`` warm inferences of one model."""
    d = resolve_model_dir(model_dir)
    meta_path = d / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    args = {
        "param": str(d / f"{variant}.param"),
        "bin": str(d / f"{variant}.bin"),
        "input": str(d / "input.npy"),
        "output": str(d / "output.npy") if (d / "output.npy").exists() else "",
        "in": meta.get("input", "in0"),
        "out": meta.get("output", "out0"),
        "vulkan": vulkan,
        "device": device,
        "loops": loops,
        "threads": threads,
        "fp32": fp32,
    }
    for key in ("param", "bin", "input"):
        if not Path(args[key]).exists():
            return {"error": f"missing {args[key]}"}
    try:
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, json.dumps(args)],
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout)[-800:]
        return {"error": f"child exited {proc.returncode}", "stderr_tail": tail}
    return json.loads(lines[-1])


def measure(
    model_dir: str | Path,
    *,
    vulkan: bool = True,
    device: int = 0,
    loops: int = 20,
    runs: int = 1,
    variant: str = "model",
    threads: int = 0,
    fp32: bool = False,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """``runs`` fresh processes; returns medians of the timings (and each run if ``runs`` > 1)."""
    d = resolve_model_dir(model_dir)
    head: dict[str, Any] = {
        "engine": "ncnn",
        "model": d.name,
        "variant": variant,
        "backend": "vulkan" if vulkan else "cpu",
        "device": device if vulkan else None,
        "fp32": fp32,
        "loops": loops,
        "runs": runs,
    }
    try:
        from importlib.metadata import version

        head["ncnn_version"] = version("ncnn")
    except Exception:
        head["ncnn_version"] = None
    results = [
        measure_once(
            d,
            vulkan=vulkan,
            device=device,
            loops=loops,
            variant=variant,
            threads=threads,
            fp32=fp32,
            timeout=timeout,
        )
        for _ in range(max(1, runs))
    ]
    good = [r for r in results if "error" not in r]
    if not good:
        return {**head, **results[0]}
    out = {**head, **{k: v for k, v in good[0].items() if k not in _NUMERIC}}
    for key in _NUMERIC:
        vals = [r[key] for r in good if key in r]
        if vals:
            out[key] = round(statistics.median(vals), 6)
    if runs > 1:
        out["per_run"] = results
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="model folder, or a name under tests/models")
    backend = parser.add_mutually_exclusive_group()
    backend.add_argument("--vulkan", dest="vulkan", action="store_true", default=True)
    backend.add_argument("--cpu", dest="vulkan", action="store_false")
    parser.add_argument("--device", type=int, default=0, help="Vulkan device index")
    parser.add_argument("--variant", default="model", help="model (fp16 weights) or model_fp32")
    parser.add_argument("--loops", type=int, default=20, help="warm inferences per process")
    parser.add_argument("--runs", type=int, default=1, help="fresh processes")
    parser.add_argument("--threads", type=int, default=0, help="ncnn CPU threads (0: default)")
    parser.add_argument("--fp32", action="store_true", help="turn off fp16/bf16 storage+math")
    parser.add_argument("--timeout", type=float, default=600.0, help="per process, seconds")
    args = parser.parse_args(argv)
    try:
        row = measure(
            args.model,
            vulkan=args.vulkan,
            device=args.device,
            loops=args.loops,
            runs=args.runs,
            variant=args.variant,
            threads=args.threads,
            fp32=args.fp32,
            timeout=args.timeout,
        )
    except Exception as e:  # never fail the caller's pipeline
        row = {"engine": "ncnn", "model": str(args.model), "error": repr(e)}
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
