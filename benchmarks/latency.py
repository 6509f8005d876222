"""Warm inference latency, asyncvk against the ``ncnn`` wheel on the same device, side by side.

    python benchmarks/latency.py [--models a,b] [--suite DIR [--suite-models a,b]]
                                 [--loops 10] [--processes 1] [--compare-conv] [--out FILE.json]
                                 [--version NAME=SOURCE_ROOT ...]

Models: ``tests/models`` (``--models``; ``--models ''`` for none) and, with ``--suite DIR``, the
folders that ``benchmarks/suite_models.py`` made (ncnn's benchmark models with generated
weights). Each folder's ``meta.json`` names the input and output blobs.

Each model is loaded once per runtime, run three times to warm up, then timed over ``--loops``
extractions (median, min, max in ms). asyncvk's shape-specialised plan is recorded on the first
run and replayed after, which is what "warm" means here.

Every runtime runs in its own fresh process: measured on the H100, asyncvk's MobileNetV2 took
2.5 ms alone but 6.4-8.6 ms in a process where the ncnn wheel had run first, so sharing a process
would measure the neighbour, not the runtime. With ``--processes N`` each runtime and model runs
in N fresh processes, one after another: ``median_ms`` is then the median of the N processes'
medians, ``process_medians_ms`` lists them and ``spread`` is (max - min) / min of them, how far
one process's number can be trusted.

``--version NAME=SOURCE_ROOT`` (repeatable) times asyncvk as the source root holding another
``asyncvk`` package has it (``asyncvk@NAME``), beside the others: two versions of the code in
one run, alternating process by process.
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
from typing import TYPE_CHECKING, Any

import numpy as np
from _common import blob_names, emit, model_folders, model_names, timed_extractions

from asyncvk import Net, Option, get_gpu_info

if TYPE_CHECKING:
    from asyncvk.gpu import ShaderChoices


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
    in_name, out_name = blob_names(d)
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
        ex.input(in_name, x)
        ret, out = ex.extract(out_name)
        np.array(out)
        elapsed = time.perf_counter() - t
        if ret != 0:
            raise RuntimeError(f"{d}: ncnn extract({out_name!r}) returned {ret}")
        return elapsed

    for _ in range(3):
        once()
    return _stats([once() for _ in range(loops)])


async def _output(d: Path, option: Option) -> np.ndarray:
    in_name, out_name = blob_names(d)
    async with Net(option) as net:
        await net.load_param(d / "model.param")
        await net.load_model(d / "model.bin")
        ex = net.create_extractor()
        ex.input(in_name, np.load(d / "input.npy"))
        return await ex.extract(out_name)


async def asyncvk_latency(d: Path, loops: int, option: Option) -> dict[str, Any]:
    in_name, out_name = blob_names(d)
    async with Net(option) as net:
        await net.load_param(d / "model.param")
        await net.load_model(d / "model.bin")
        await net.background_builds()  # time what the model settles on
        x = np.load(d / "input.npy")
        result: dict[str, Any] = _stats(await timed_extractions(net, in_name, x, out_name, loops))
        result["pipelines"] = net.cache.statistics().pipelines_created
        ex = net.create_extractor()
        ex.input(in_name, x)
        out = await ex.extract(out_name)
    if option.use_fp16_storage or option.use_fp16_arithmetic:
        # after the timing, in the same process: how far fp16 moved the output from fp32
        reference = await _output(d, Option())
        if reference.shape == out.shape:
            error = np.linalg.norm(out - reference) / max(np.linalg.norm(reference), 1e-30)
            result["rel_l2_vs_fp32"] = float(f"{error:.3g}")
        else:
            result["rel_l2_vs_fp32"] = f"shape {out.shape} vs fp32 {reference.shape}"
    return result


VARIANTS = (
    "ncnn",
    "asyncvk",
    "asyncvk_fp16",
    "asyncvk_tiled_conv",
    "asyncvk_fp16_arith",
    "asyncvk_fp16_all",
    "asyncvk_no_splitk",
    "asyncvk_plain_gemm",
    "asyncvk_no_conv_gemm",
    "asyncvk_no_winograd",
    "asyncvk_scalar_gemm_loads",
    "asyncvk_own_conv_weights",
)


def _host_python_loop_ms() -> float:
    """This process's host speed after its runs: host_speed.py's pure-Python loop (the same
    work in every process; on the H100 hosts measured it takes about 6 or 10 ms, by the core)."""
    from host_speed import measure_python_loop

    return measure_python_loop()


def measure_variant(variant: str, d: Path, loops: int) -> dict[str, Any]:
    """One runtime on one model, in this process (a child of ``main``), with its host speed."""
    result = _measure_variant(variant, d, loops)
    result["host_python_loop_ms"] = _host_python_loop_ms()
    return result


def variant_choices(variant: str) -> ShaderChoices | None:
    """The shaders a variant runs in place of the device's defaults (None: the defaults).
    Imported here: a ``--version`` of the code from before ShaderChoices still runs."""
    from asyncvk.gpu import ShaderChoices

    return {
        "asyncvk_no_splitk": ShaderChoices(conv_splitk="never"),  # deep convolutions, one-output
        "asyncvk_no_conv_gemm": ShaderChoices(conv_gemm="never"),  # large maps, one-output
        "asyncvk_no_winograd": ShaderChoices(conv_winograd="never"),  # CPU devices: tiled 3x3
        "asyncvk_plain_gemm": ShaderChoices(gemm_tiled="never"),  # gemm.comp, not gemm_tiled
        "asyncvk_scalar_gemm_loads": ShaderChoices(gemm_vec4_loads=False),  # one k a load
        "asyncvk_own_conv_weights": ShaderChoices(conv_shared_weights=False),  # all 8 per lane
        "asyncvk_tiled_conv": ShaderChoices(  # the other convolution shader than the device's
            conv_tiled="never" if get_gpu_info().is_cpu else "always"
        ),
    }.get(variant)


def _measure_variant(variant: str, d: Path, loops: int) -> dict[str, Any]:
    if variant == "ncnn":
        return ncnn_latency(d, loops)
    if variant == "asyncvk":  # as it is: also what a --version that predates choices runs
        return asyncio.run(asyncvk_latency(d, loops, Option()))
    option = Option(
        use_fp16_storage=variant in ("asyncvk_fp16", "asyncvk_fp16_all"),
        # fp16 operands where a shader has them (the matrix-unit convolution); "all": both
        # fp16 settings, as ncnn's defaults are
        use_fp16_arithmetic=variant in ("asyncvk_fp16_arith", "asyncvk_fp16_all"),
        shader_choices=variant_choices(variant),
    )
    return asyncio.run(asyncvk_latency(d, loops, option))


def _in_child(
    variant: str, d: Path, loops: int, timeout: float, source: Path | None = None
) -> dict[str, Any]:
    """``variant`` in a fresh process; ``source``: with that root's ``asyncvk`` package."""
    argv = [sys.executable, __file__, "--child", variant, "--child-dir", str(d)]
    env = None
    if source is not None:
        path = os.pathsep.join(filter(None, [str(source), os.environ.get("PYTHONPATH")]))
        env = dict(os.environ, PYTHONPATH=path)
    try:
        out = subprocess.run(
            [*argv, "--loops", str(loops)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else "failed"}
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def in_processes(
    variant: str, d: Path, loops: int, processes: int, timeout: float, source: Path | None = None
) -> dict[str, Any]:
    """One runtime on one model in ``processes`` fresh processes, one after another: the
    median of their medians, each process's median, and their spread."""
    runs = [_in_child(variant, d, loops, timeout, source) for _ in range(processes)]
    return summary(runs)


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median of the processes' medians, each process's median, and their spread."""
    good = [r for r in runs if "median_ms" in r]
    errors = [r["error"] for r in runs if "error" in r]
    if not good:
        return {"error": errors[-1] if errors else "no process reported"}
    medians = [r["median_ms"] for r in good]
    result: dict[str, Any] = {
        "median_ms": round(statistics.median(medians), 3),
        "min_ms": min(r["min_ms"] for r in good),
        "max_ms": max(r["max_ms"] for r in good),
        "process_medians_ms": medians,
        "spread": round((max(medians) - min(medians)) / min(medians), 3),
    }
    for key in ("pipelines", "rel_l2_vs_fp32"):
        if key in good[-1]:
            result[key] = good[-1][key]
    speeds = [r["host_python_loop_ms"] for r in good if "host_python_loop_ms" in r]
    if speeds:  # a spread that follows these is the machine's, not the runtime's
        result["host_python_loop_ms"] = speeds
    if errors:
        result["errors"] = errors
    return result


def _ratios(row: dict[str, Any]) -> None:
    """asyncvk (and asyncvk fp16) median over ncnn's, where both ran."""
    ncnn = row.get("ncnn", {}).get("median_ms")
    for key, label in (
        ("asyncvk", "asyncvk_over_ncnn"),
        ("asyncvk_fp16", "asyncvk_fp16_over_ncnn"),
        ("asyncvk_fp16_arith", "asyncvk_fp16_arith_over_ncnn"),
        ("asyncvk_fp16_all", "asyncvk_fp16_all_over_ncnn"),
    ):
        ours = row.get(key, {}).get("median_ms")
        if ncnn and ours is not None:
            row[label] = round(ours / ncnn, 2)


def _brief(row: dict[str, Any]) -> dict[str, Any]:
    """One short line per model while the run goes on: each runtime's median (or error)."""
    brief: dict[str, Any] = {"model": row["model"]}
    for key, value in row.items():
        if isinstance(value, dict):
            brief[key] = value.get("median_ms", value.get("error", "")[:120])
        elif key.endswith("_over_ncnn"):
            brief[key] = value
    return brief


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(model_names()), help="tests/models names")
    parser.add_argument("--suite", type=Path, default=None, help="suite_models.py's output")
    parser.add_argument("--suite-models", default="", help="comma-separated (default: all)")
    parser.add_argument("--loops", type=int, default=10)
    parser.add_argument("--processes", type=int, default=1, help="fresh processes per runtime")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per process")
    parser.add_argument("--out", default=None)
    parser.add_argument(
        "--compare-conv",
        action="store_true",
        help="also time asyncvk with the other convolution shader (tiled / one output each)",
    )
    parser.add_argument(
        "--variants",
        default="",
        help=f"comma-separated runtimes to time (default: the first three of {','.join(VARIANTS)})",
    )
    parser.add_argument(
        "--version",
        action="append",
        default=[],
        metavar="NAME=SOURCE_ROOT",
        help="also time asyncvk from another source root (asyncvk@NAME), alternating processes",
    )
    parser.add_argument("--child", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--child-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure_variant(args.child, args.child_dir, args.loops)))
        return 0
    if args.loops < 1 or args.processes < 1:
        parser.error("--loops and --processes must be at least 1")
    folders = model_folders(args.models, args.suite, args.suite_models)
    versions: dict[str, Path] = {}
    for given in args.version:
        name, sep, root = given.partition("=")
        if not sep or not name or not (Path(root) / "asyncvk").is_dir():
            parser.error(f"--version {given!r}: want NAME=SOURCE_ROOT holding an asyncvk package")
        versions[name] = Path(root).resolve()
    info = get_gpu_info()
    variants = VARIANTS[:4] if args.compare_conv else VARIANTS[:3]
    if args.variants:
        variants = tuple(v for v in args.variants.split(",") if v)
        unknown = set(variants) - set(VARIANTS)
        if unknown:
            parser.error(f"--variants: unknown {', '.join(sorted(unknown))}")
    report: dict[str, Any] = {
        "device": info.device_name,
        "driver": f"{info.driver_name} {info.driver_info}",
        "cpu_count": os.cpu_count(),
        "loops": args.loops,
        "processes": args.processes,
        "isolation": "one fresh process per runtime, model and repeat",
        "models": [],
    }
    for source, d in folders:
        row: dict[str, Any] = {"model": d.name, "source": source}
        for variant in variants:
            key = variant
            if variant == "asyncvk_tiled_conv":
                key = f"asyncvk_tiled_conv_{'never' if info.is_cpu else 'always'}"
            row[key] = in_processes(variant, d, args.loops, args.processes, args.timeout)
        if versions:  # one process of each version in turn, so a drift hits both alike
            runs: dict[str, list[dict[str, Any]]] = {name: [] for name in versions}
            for _ in range(args.processes):
                for name, root in versions.items():
                    runs[name].append(_in_child("asyncvk", d, args.loops, args.timeout, root))
            for name in versions:
                row[f"asyncvk@{name}"] = summary(runs[name])
        _ratios(row)
        report["models"].append(row)
        print(json.dumps(_brief(row)), file=sys.stderr, flush=True)
        if args.out:  # what is done so far survives a run cut short
            Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    emit(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
