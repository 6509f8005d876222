"""The commands that load a model on the device: ``run``, ``bench``, ``cache warm`` and
``serve``. Each imports numpy and the rest of asyncvk inside, beside the device thread."""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ._progress import Progress
from ._report import mark, print_report, user_clock


def _config(args: argparse.Namespace, progress: Progress | None = None) -> Any:
    from ._runner import RunConfig

    if getattr(args, "cache", None) and getattr(args, "cache_dir", None):
        raise ValueError("use either --cache FILE or --cache-dir DIR --graph-key KEY, not both")
    check_cache_folder_args(args)
    cache_file = _usable_cache_target(getattr(args, "cache", None))
    check_remote_cache_arg(args)
    return RunConfig(
        param=args.param,
        model=_model_source(args),
        cache_file=cache_file,
        cache_dir=getattr(args, "cache_dir", None),
        graph_key=getattr(args, "graph_key", None),
        device=getattr(args, "device", None),
        cpu=getattr(args, "cpu", False),
        fp16=getattr(args, "fp16", False),
        fp16_arithmetic=getattr(args, "fp16_arith", False),
        compile_threads=getattr(args, "compile_threads", None),
        must_hit=getattr(args, "must_hit", False),
        shape_hints=getattr(args, "shape_hints", False),
        remote_cache=getattr(args, "remote_cache", None),
        progress=progress.counter("loading model") if progress else None,
    )


def _model_source(args: argparse.Namespace) -> str:
    """The ``.bin`` named, or the random weights asked for: one of the two."""
    from ._runner import RANDOM_WEIGHTS

    random = getattr(args, "random_weights", False)
    if random and args.bin:
        raise ValueError(f"give the .bin ({args.bin}) or --random-weights, not both")
    if not random and not args.bin:
        raise ValueError("the .bin is missing (or use --random-weights for a .param alone)")
    return RANDOM_WEIGHTS if random else str(args.bin)


def check_cache_folder_args(args: argparse.Namespace) -> None:
    """A cache folder is named by both ``--cache-dir`` and ``--graph-key``, or by neither."""
    if bool(getattr(args, "cache_dir", None)) != bool(getattr(args, "graph_key", None)):
        raise ValueError("--cache-dir and --graph-key go together")


def check_remote_cache_arg(args: argparse.Namespace) -> None:
    """A malformed ``--remote-cache`` URL is refused before any work is done."""
    url = getattr(args, "remote_cache", None)
    if url:
        from ..cache._remote_store import parse_remote_url

        parse_remote_url(url, where="--remote-cache")


def _usable_cache_target(path: str | None) -> str | None:
    """``--cache FILE`` if the run may read and replace it; else None, said in one line: a path
    holding something that is not a cache file (the model's weights, a device) is never
    replaced, and one another user could have written is never read. Either costs the run its
    cache, never the run."""
    if not path:
        return None
    import sys

    from ..cache._safe_fs import expand_path, ownership_refusal, replace_refusal

    target = expand_path(path)
    why = replace_refusal(target) or ownership_refusal(target)
    if why is None:
        return path
    print(f"asyncvk: --cache {path}: {why}; running without the cache", file=sys.stderr)
    return None


@asynccontextmanager
async def _opened(args: argparse.Namespace, progress: Progress) -> AsyncIterator[Any]:
    """The Net the command asked for, with its report; on the way out the progress display
    stops and the cache is saved (and the Net released when asked) into the report."""
    from ._runner import close_net, open_net

    opened = await open_net(_config(args, progress))
    try:
        yield opened
    finally:
        progress.close()
        opened.report.update(await close_net(opened, release=args.release_at_exit))


async def _run(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:

    from ._runner import cache_counters, load_npy, memory_peaks

    mark("imports_done")
    inputs = [load_npy(s) for s in args.input]
    outputs = [(name, output_path(name, path)) for name, _, path in map(_split, args.output)]
    folder = _output_folder(args.output_dir)
    async with _opened(args, progress) as opened:
        report = opened.report
        net = opened.net
        names = [name for name, _ in outputs] or net.output_names
        if folder:
            outputs = [(name, os.path.join(folder, _file_name(name))) for name in names]
        t0 = time.perf_counter()
        ex = net.create_extractor()
        for name, array in inputs:
            ex.input(name, array)
        with progress.step("first inference"):
            results = await ex.extract_many(names)
        report["infer_s"] = time.perf_counter() - t0
        mark("first_output")
        report["_first_output_monotonic"] = time.monotonic()
        # the in-process part only: load_param + load_model + first inference
        report["load_and_infer_s"] = (
            report["load_param_s"] + report["load_model_s"] + report["infer_s"]
        )
        written = {}
        for name, path in outputs:
            if path:
                _save_exactly(path, results[name])
                written[name] = path
        report["written"] = written
        mark("first_output_written")
        report.update(cache_counters(opened))
        report.update(memory_peaks(opened))
        report["outputs"] = {
            k: {  # an empty output (a detector that found nothing) has no mean
                "shape": list(v.shape),
                "mean": float(v.mean()) if v.size else None,
                "checksum": float(v.sum()),
            }
            for k, v in results.items()
        }
    return report


def _output_folder(folder: str | None) -> str | None:
    """``--output-dir``: an existing folder this user can write in, checked before the load."""
    if folder is None:
        return None
    if not os.path.isdir(folder):
        raise ValueError(f"--output-dir {folder}: no such folder")
    if not os.access(folder, os.W_OK):
        raise ValueError(f"--output-dir {folder}: cannot be written (permission denied)")
    return folder


def _file_name(blob: str) -> str:
    """A blob's name as a file name: characters a path gives meaning to become ``_``."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in blob).lstrip(".")
    return f"{safe or '_'}.npy"


def _save_exactly(path: str, array: Any) -> None:
    """An .npy at exactly ``path`` (``np.save`` given a name would add ``.npy`` to it)."""
    import numpy as np

    with open(path, "wb") as f:
        np.save(f, array)


def _split(spec: str) -> tuple[str, str, str]:
    name, sep, path = spec.partition("=")
    if not name or (sep and not path):
        raise ValueError(f"--output {spec!r}: expected NAME or NAME=PATH")
    return name, sep, path


def output_path(name: str, path: str) -> str:
    """Where ``--output NAME=PATH`` writes, checked before anything is loaded: exactly PATH,
    or PATH/NAME.npy when PATH is a folder; an output that cannot be written is refused now,
    not after the model ran. An empty PATH (``--output NAME``) writes nothing."""
    import os

    if not path:
        return ""
    target = os.path.join(path, f"{name}.npy") if os.path.isdir(path) else path
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise ValueError(f"--output {name}={path}: the folder {folder} does not exist")
    if os.path.exists(target) and not os.path.isfile(target):
        raise ValueError(f"--output {name}={path}: {target} exists and is not a regular file")
    if not os.access(folder, os.W_OK) or (
        os.path.exists(target) and not os.access(target, os.W_OK)
    ):
        raise ValueError(f"--output {name}={path}: {target} cannot be written (permission denied)")
    return target


def cmd_run(args: argparse.Namespace) -> int:
    import asyncio

    with Progress.for_terminal(args.quiet) as progress:
        report = asyncio.run(_run(args, progress))
    report["clock"] = user_clock(report)

    def text() -> None:
        clock = report["clock"]
        if clock["process_start_to_first_output_s"] is not None:
            print(
                f"first output  {clock['process_start_to_first_output_s'] * 1000:9.1f} ms "
                "after the process started"
            )
        print(f"device        {report['device']['name']}")
        print(
            f"cache         {'loaded' if report['cache_loaded'] else 'cold'} "
            f"({report['cache_reason']})"
        )
        print(f"load_param    {report['load_param_s'] * 1000:9.1f} ms")
        print(
            f"load_model    {report['load_model_s'] * 1000:9.1f} ms  "
            f"({report['pipelines_created']} pipelines created, "
            f"{report['spirv_compiled']} shaders compiled, "
            f"{report['spirv_packaged']} from the package)"
        )
        print(f"inference     {report['infer_s'] * 1000:9.1f} ms")
        rss, device = report["peak_host_rss_bytes"], report["device_memory_reserved_bytes"]
        if rss is not None:
            dev = f", device {device / 2**20:.0f} MiB reserved" if device is not None else ""
            print(f"peak memory   host RSS {rss / 2**20:.0f} MiB{dev}")
        for name, o in report["outputs"].items():
            mean = "empty" if o["mean"] is None else f"mean {o['mean']:.6g}"
            where = report["written"].get(name)
            saved = f", written to {where}" if where else ", not written (--output-dir DIR)"
            print(f"output {name}: shape {o['shape']} {mean}{saved}")

    print_report(args, report, text)
    return 0


async def _bench(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    import statistics

    import numpy as np

    from ._runner import cache_counters, parse_input_shape

    mark("imports_done")
    shapes = [parse_input_shape(s) for s in args.shape]
    if not shapes:
        raise ValueError("bench needs at least one --shape NAME=C,H,W")
    batch = () if args.batch is None else (args.batch,)
    async with _opened(args, progress) as opened:
        report = opened.report
        net = opened.net
        names = args.output or net.output_names
        rng = np.random.default_rng(0)
        feeds = {n: rng.standard_normal(batch + s, dtype=np.float32) for n, s in shapes}
        report["batch"] = args.batch
        report["outputs"] = list(names)

        async def once() -> float:
            ex = net.create_extractor()
            for n, a in feeds.items():
                ex.input(n, a, batch_axis=bool(batch))
            t = time.perf_counter()
            await ex.extract_many(names)
            return time.perf_counter() - t

        with progress.step("first inference"):
            report["first_infer_s"] = await once()
        mark("first_output")
        report["_first_output_monotonic"] = time.monotonic()
        with progress.step("warm-up runs", args.warmup) as done:
            for _ in range(args.warmup):
                await once()
                done()
        times = []
        with progress.step("timed runs", args.loops) as done:
            for _ in range(args.loops):
                times.append(await once())
                done()
        report["latency_ms"] = {
            "min": min(times) * 1000,
            "median": statistics.median(times) * 1000,
            "max": max(times) * 1000,
            "loops": args.loops,
        }
        report.update(cache_counters(opened))
    return report


def cmd_bench(args: argparse.Namespace) -> int:
    import asyncio

    with Progress.for_terminal(args.quiet) as progress:
        report = asyncio.run(_bench(args, progress))
    report["clock"] = user_clock(report)

    def text() -> None:
        lat = report["latency_ms"]
        first = report["clock"]["process_start_to_first_output_s"]
        if first is not None:
            print(f"first output {first * 1000:8.1f} ms after the process started")
        print(f"device       {report['device']['name']}")
        print(f"load_param   {report['load_param_s'] * 1000:8.1f} ms")
        print(f"load_model   {report['load_model_s'] * 1000:8.1f} ms")
        print(f"first infer  {report['first_infer_s'] * 1000:8.1f} ms")
        print(
            f"latency      min {lat['min']:.2f}  median {lat['median']:.2f}  "
            f"max {lat['max']:.2f} ms over {lat['loops']} loops"
        )

    print_report(args, report, text)
    return 0


async def _warm(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    import numpy as np

    from ._runner import cache_counters, parse_input_shape

    if not args.cache and not args.cache_dir:
        raise ValueError("cache warm needs --cache FILE or --cache-dir DIR --graph-key KEY")
    shapes = [parse_input_shape(s) for s in args.shape]
    async with _opened(args, progress) as opened:
        report = opened.report
        net = opened.net
        if shapes:
            ex = net.create_extractor()
            for n, s in shapes:
                ex.input(n, np.zeros(s, np.float32))
            with progress.step("inference at the given shapes"):
                await ex.extract_many([args.output] if args.output else net.output_names)
            report["warmed_shapes"] = {n: list(s) for n, s in shapes}
        report.update(cache_counters(opened))
    return report


def cmd_cache_warm(args: argparse.Namespace) -> int:
    import asyncio

    with Progress.for_terminal(args.quiet) as progress:
        report = asyncio.run(_warm(args, progress))

    def text() -> None:
        print(
            f"built {report['pipelines_created']} pipelines "
            f"({report['spirv_compiled']} shaders compiled, "
            f"{report['spirv_packaged']} from the package) in "
            f"{report['load_model_s'] * 1000:.1f} ms; saved: {report.get('cache_saved')}"
        )

    print_report(args, report, text)
    return 0 if report.get("cache_saved", True) else 1
