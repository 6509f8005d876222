"""The ``asyncvk`` command line. Every command takes ``--json``; errors print one line and exit
non-zero (``--debug`` shows the traceback).

Its first lines import only the standard library: a command that uses the GPU starts opening
the Vulkan device on a thread as soon as its arguments are parsed (the driver's 100-200 ms run
in C, with the GIL released), and numpy and the rest of asyncvk are imported beside it.
``run`` and ``bench`` report time from the kernel's start of the process (``clock``), the
clock a user holds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from ._errors import AsyncVkError
from ._process_clock import since_process_start
from ._progress import Progress


def _print(args: argparse.Namespace, data: dict[str, Any], text: Callable[[], None]) -> None:
    if args.json:
        print(json.dumps(data, indent=2, default=_jsonable))
    else:
        text()


def _jsonable(value: Any) -> Any:
    import numpy as np

    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return str(value)


# -- the user's clock ---------------------------------------------------------------------------

#: Seconds from process start to moments of this run (``clock`` in run/bench reports).
_marks: dict[str, float | None] = {}


def _mark(name: str) -> None:
    _marks[name] = since_process_start()


def _open_device(index: int | None) -> None:
    """Thread body: open the device that ``open_net`` will ask for. A failure here is left for
    that call to raise, where the user's command reports it."""
    try:
        # The instance first: gpu._instance needs only Vulkan, so the driver loads while the
        # main thread imports numpy (which gpu._device needs, and waits for here).
        from .gpu._instance import get_gpu_count

        if get_gpu_count() > 0:
            _mark("instance_created")
            from .gpu._device import get_gpu_device

            get_gpu_device(index)
            _mark("device_opened")
    except Exception:  # the main thread's own call raises it
        pass


def _start_opening_device(args: argparse.Namespace) -> None:
    """For commands that load a model on the GPU: open the device now, on a thread, while this
    thread imports numpy and asyncvk. ``get_gpu_device`` joins it (gpu's own locks)."""
    if args.func not in _DEVICE_COMMANDS or getattr(args, "cpu", False):
        return
    threading.Thread(
        target=_open_device, args=(args.device,), name="asyncvk-open-device", daemon=True
    ).start()


def _clock(report: dict[str, Any]) -> dict[str, Any]:
    """Process start to each moment, as the user's clock reads it (None off Linux)."""
    _mark("exit")
    clock: dict[str, Any] = {
        "process_start_to_first_output_s": _marks.get("first_output"),
        "process_start_to_exit_s": _marks.get("exit"),
        "source": "kernel process start time (/proc/self/stat, 1 clock tick) vs CLOCK_BOOTTIME",
        "first_output_monotonic_s": report.pop("_first_output_monotonic", None),
    }
    moments = ("main", "instance_created", "imports_done", "device_opened", "first_output_written")
    for name in moments:
        clock[f"process_start_to_{name}_s"] = _marks.get(name)
    return clock


# -- info ---------------------------------------------------------------------------------------


def _cmd_info(args: argparse.Namespace) -> int:
    from .gpu import get_default_gpu_index, get_gpu_count, get_gpu_info

    count = get_gpu_count()
    devices = [get_gpu_info(i).as_dict() for i in range(count)]
    default = get_default_gpu_index() if count else None

    def text() -> None:
        if not devices:
            print("no Vulkan device found (install mesa-vulkan-drivers for lavapipe)")
        for d in devices:
            mark = "*" if d["index"] == default else " "
            print(f"{mark} [{d['index']}] {d['device_name']} ({d['device_type']})")
            print(f"      driver  {d['driver_name']} {d['driver_info']} (id {d['driver_id']})")
            print(
                f"      api     {d['api_version']}  vendor 0x{d['vendor_id']:04x} "
                f"device 0x{d['device_id']:04x}  uuid {d['pipeline_cache_uuid']}"
            )
            print(
                f"      fp16 storage {d['support_fp16_storage']}  fp16 arith "
                f"{d['support_fp16_arithmetic']}  int8 {d['support_int8_storage']}  "
                f"subgroup {d['subgroup_size']}"
            )
            flags = [k for k, v in d["quirks"].items() if v is True]
            print(f"      quirks  {', '.join(flags) or 'none'}")

    _print(args, {"default_device": default, "devices": devices}, text)
    return 0 if devices or args.json else 1


def _cmd_layers(args: argparse.Namespace) -> int:
    from .layers._catalog import layer_catalog, layers_markdown, layers_text

    infos = layer_catalog()
    if args.markdown:
        sys.stdout.write(layers_markdown(infos))
        return 0
    data = {"count": len(infos), "layers": [info.as_json() for info in infos]}
    _print(args, data, lambda: print(layers_text(infos), end=""))
    return 0


# -- run / bench / warm -------------------------------------------------------------------------


def _config(args: argparse.Namespace, progress: Progress | None = None) -> Any:
    from ._runner import RunConfig

    if getattr(args, "cache", None) and getattr(args, "cache_dir", None):
        raise ValueError("use either --cache FILE or --cache-dir DIR --graph-key KEY, not both")
    if bool(getattr(args, "cache_dir", None)) != bool(getattr(args, "graph_key", None)):
        raise ValueError("--cache-dir and --graph-key go together")
    _refuse_unsafe_cache_target(getattr(args, "cache", None))
    return RunConfig(
        param=args.param,
        model=args.bin,
        cache_file=getattr(args, "cache", None),
        cache_dir=getattr(args, "cache_dir", None),
        graph_key=getattr(args, "graph_key", None),
        device=getattr(args, "device", None),
        cpu=getattr(args, "cpu", False),
        fp16=getattr(args, "fp16", False),
        compile_threads=getattr(args, "compile_threads", None),
        must_hit=getattr(args, "must_hit", False),
        shape_hints=getattr(args, "shape_hints", False),
        progress=progress.counter("loading model") if progress else None,
    )


def _refuse_unsafe_cache_target(path: str | None) -> None:
    """``--cache FILE`` must name a cache file or nothing: say so before any work is done."""
    if not path:
        return
    from .cache._safe_fs import expand_path, replace_refusal

    why = replace_refusal(expand_path(path))
    if why is not None:
        raise ValueError(f"--cache {path}: {why}")


async def _run(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    import numpy as np

    from ._runner import cache_counters, close_net, default_output, load_npy, memory_peaks, open_net

    _mark("imports_done")
    inputs = [load_npy(s) for s in args.input]
    outputs = [s.partition("=") for s in args.output]
    opened = await open_net(_config(args, progress))
    report = opened.report
    try:
        net = opened.net
        names = [name for name, _, _ in outputs] or [default_output(net)]
        t0 = time.perf_counter()
        ex = net.create_extractor()
        for name, array in inputs:
            ex.input(name, array)
        results = {}
        with progress.step("first inference"):
            for name in names:
                results[name] = await ex.extract(name)
        report["infer_s"] = time.perf_counter() - t0
        _mark("first_output")
        report["_first_output_monotonic"] = time.monotonic()
        # the in-process part only: load_param + load_model + first inference
        report["load_and_infer_s"] = (
            report["load_param_s"] + report["load_model_s"] + report["infer_s"]
        )
        for name, _, path in outputs:
            if path:
                np.save(path, results[name])
        _mark("first_output_written")
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
    finally:
        progress.close()
        report.update(await close_net(opened, release=args.release_at_exit))
    return report


def _cmd_run(args: argparse.Namespace) -> int:
    import asyncio

    with Progress.for_terminal(args.quiet) as progress:
        report = asyncio.run(_run(args, progress))
    report["clock"] = _clock(report)

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
            f"{report['spirv_compiled']} shaders compiled)"
        )
        print(f"inference     {report['infer_s'] * 1000:9.1f} ms")
        rss, device = report["peak_host_rss_bytes"], report["device_memory_reserved_bytes"]
        if rss is not None:
            dev = f", device {device / 2**20:.0f} MiB reserved" if device is not None else ""
            print(f"peak memory   host RSS {rss / 2**20:.0f} MiB{dev}")
        for name, o in report["outputs"].items():
            mean = "empty" if o["mean"] is None else f"mean {o['mean']:.6g}"
            print(f"output {name}: shape {o['shape']} {mean}")

    _print(args, report, text)
    return 0


async def _bench(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    import statistics

    import numpy as np

    from ._runner import cache_counters, close_net, default_output, open_net, parse_input_shape

    _mark("imports_done")
    shapes = [parse_input_shape(s) for s in args.shape]
    if not shapes:
        raise ValueError("bench needs at least one --shape NAME=C,H,W")
    opened = await open_net(_config(args, progress))
    report = opened.report
    try:
        net = opened.net
        target = args.output or default_output(net)
        rng = np.random.default_rng(0)
        feeds = {n: rng.standard_normal(s, dtype=np.float32) for n, s in shapes}

        async def once() -> float:
            ex = net.create_extractor()
            for n, a in feeds.items():
                ex.input(n, a)
            t = time.perf_counter()
            await ex.extract(target)
            return time.perf_counter() - t

        with progress.step("first inference"):
            report["first_infer_s"] = await once()
        _mark("first_output")
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
    finally:
        progress.close()
        report.update(await close_net(opened, release=args.release_at_exit))
    return report


def _cmd_bench(args: argparse.Namespace) -> int:
    import asyncio

    with Progress.for_terminal(args.quiet) as progress:
        report = asyncio.run(_bench(args, progress))
    report["clock"] = _clock(report)

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

    _print(args, report, text)
    return 0


async def _warm(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    import numpy as np

    from ._runner import cache_counters, close_net, default_output, open_net, parse_input_shape

    if not args.cache and not args.cache_dir:
        raise ValueError("cache warm needs --cache FILE or --cache-dir DIR --graph-key KEY")
    shapes = [parse_input_shape(s) for s in args.shape]
    opened = await open_net(_config(args, progress))
    report = opened.report
    try:
        net = opened.net
        if shapes:
            ex = net.create_extractor()
            for n, s in shapes:
                ex.input(n, np.zeros(s, np.float32))
            with progress.step("inference at the given shapes"):
                await ex.extract(args.output or default_output(net))
            report["warmed_shapes"] = {n: list(s) for n, s in shapes}
        report.update(cache_counters(opened))
    finally:
        progress.close()
        report.update(await close_net(opened, release=args.release_at_exit))
    return report


def _cmd_cache_warm(args: argparse.Namespace) -> int:
    import asyncio

    with Progress.for_terminal(args.quiet) as progress:
        report = asyncio.run(_warm(args, progress))

    def text() -> None:
        print(
            f"built {report['pipelines_created']} pipelines "
            f"({report['spirv_compiled']} shaders compiled) in "
            f"{report['load_model_s'] * 1000:.1f} ms; saved: {report.get('cache_saved')}"
        )

    _print(args, report, text)
    return 0 if report.get("cache_saved", True) else 1


# -- cache inspect / verify ---------------------------------------------------------------------


def _cmd_cache_inspect(args: argparse.Namespace) -> int:
    from .cache._file_format import describe_cache, read_cache_source

    data = read_cache_source(args.file)
    if not isinstance(data, bytes):
        raise ValueError(f"{args.file}: {data.reason}")
    try:
        info = describe_cache(data)
    except ValueError as exc:
        raise ValueError(f"{args.file}: not a readable asyncvk cache file: {exc}") from None
    info["this_device"] = _verify(args.file, args.device)
    _print(args, info, lambda: _print_inspection(args.file, info))
    return 0 if info["valid"] else 1


def _print_inspection(path: str, info: dict[str, Any]) -> None:
    """``cache inspect`` for people: what the file holds and what this machine makes of it."""
    h = info["header"]
    state = "valid" if info["valid"] else f"INVALID: {info['reason']}"
    version = f"format {h['format_version']}, asyncvk {h['asyncvk_version']}"
    print(f"{path}: asyncvk pipeline cache ({version}), {info['size']:,} bytes")
    print(f"  status       {state}")
    here = info["this_device"].get("device")
    if here and here.get("device_name_hash") == h["device_name_hash"]:
        device = f"{here['name']} ({here['driver']}) - this machine's device"
    else:
        device = f"vendor 0x{h['vendor_id']:04x} device 0x{h['device_id']:04x} (not this machine's)"
    print(f"  device       {device}, driver version {h['driver_version']}")
    entries = info["spirv_entries"]
    damaged = [e for e in entries if e["status"] != "ok"]
    shaders = ", ".join(sorted({e["shader"] for e in entries})[:8]) or "none"
    more = f", {len(damaged)} damaged" if damaged else ""
    print(f"  SPIR-V       {len(entries)} entries{more}, {h['bodies_size']:,} bytes ({shaders})")
    print(f"  driver blob  {info['driver_blob_bytes']:,} bytes")
    print(f"  on this machine: {_verdict_words(info['this_device'])}")


def _verdict_words(verdict: dict[str, Any]) -> str:
    """What a run on this machine would do with the file, in one plain sentence."""
    if verdict["accepted"]:
        return f"accepted: all {verdict['entries_used']} SPIR-V entries will be used"
    if verdict.get("loaded"):
        return (
            f"usable in part: {verdict['entries_used']} SPIR-V entries will be used, "
            f"{verdict['entries_skipped']} rebuilt from source"
        )
    return f"not usable ({verdict['reason']}): every pipeline will be built from source"


def _verify(path: str, device_index: int | None) -> dict[str, Any]:
    from .cache._pipeline_cache import PipelineCache
    from .gpu import get_gpu_count, get_gpu_device

    if get_gpu_count() == 0:
        return {"accepted": False, "loaded": False, "reason": "no Vulkan device"}
    from .gpu._identity import name_hash

    device = get_gpu_device(device_index)
    info = device.info
    here = {
        "name": info.device_name,
        "driver": f"{info.driver_name} {info.driver_info}".strip(),
        "device_name_hash": f"{name_hash(info.device_name):016x}",  # as inspect shows it
    }
    with PipelineCache(device, read_only=True) as cache:
        result = cache.load_cache(path)
        # what a run would find at first use: a body that is not the shader its key names
        problems = cache.check_spirv_entries() if result else []
        accepted = bool(result) and result.entries_skipped == 0 and not problems
        return {
            "accepted": accepted,
            "loaded": bool(result),
            "device": here,
            "reason": f"SPIR-V entries a run would drop: {len(problems)}"
            if problems
            else result.reason,
            "entries_used": result.entries_used - len(problems),
            "entries_skipped": result.entries_skipped + len(problems),
            "skipped": [*result.skipped, *problems],
        }


def _cmd_cache_verify(args: argparse.Namespace) -> int:
    verdict = _verify(args.file, args.device)

    def text() -> None:
        print(f"{args.file}: {_verdict_words(verdict)}")
        if verdict.get("loaded"):
            for reason in verdict.get("skipped", []):
                print(f"  rebuilt: {reason}")

    _print(args, verdict, text)
    return 0 if verdict["accepted"] else 1


def _cmd_cache_ls(args: argparse.Namespace) -> int:
    import time as _time

    from .cache._directory import CacheDirectory

    directory = CacheDirectory(args.dir, read_only=True)
    if not directory.path.is_dir():
        what = "a file" if directory.path.exists() else "no such folder"
        raise FileNotFoundError(f"{args.dir} is not a cache folder ({what})")
    rows: list[dict[str, Any]] = []
    for key in directory.keys():
        for e in directory.entries(key):
            rows.append(
                {
                    "graph_key": e.graph_key,
                    "file": e.file,
                    "device": e.device,
                    "size": e.size,
                    "age_s": round(_time.time() - e.created, 1),
                    "last_used_s": round(_time.time() - e.last_used, 1),
                    "asyncvk_version": e.asyncvk_version,
                    "model_fingerprint": e.model_fingerprint,
                }
            )

    def text() -> None:
        for problem in directory.problems:
            print(f"warning: {problem}", file=sys.stderr)
        if not rows:
            print(f"{args.dir}: no cache entries")
        for r in rows:
            dev = r["device"]
            print(
                f"{r['graph_key']:<24} {dev.get('device_name') or hex(dev['vendor_id'])}"
                f" driver {dev['driver_version']}  {r['size']:>9} B  "
                f"age {r['age_s']:.0f}s  {r['file']}"
            )

    _print(args, {"dir": args.dir, "entries": rows, "problems": directory.problems}, text)
    return 0


def _cmd_cache_prune(args: argparse.Namespace) -> int:
    from .cache._directory import DEFAULT_MAX_BYTES, CacheDirectory

    directory = CacheDirectory(args.dir, max_bytes=args.max_bytes or DEFAULT_MAX_BYTES)
    result = directory.prune()

    def text() -> None:
        for problem in result["problems"]:
            print(f"warning: {problem}", file=sys.stderr)
        for name in result["removed"]:
            print(f"removed {name}")
        if result["left"]:
            print(f"left alone (not asyncvk's): {', '.join(result['left'])}")
        print(f"removed {result['removed_files']} file(s)")

    _print(args, result, text)
    return 0


def _cmd_shapehint(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ._runner import parse_shape
    from .net._param_parser import parse_param_text
    from .net._shape_hints import infer_shapes, write_hints

    inputs: dict[str, tuple[int, ...]] = {}
    for spec in args.shape:
        name, shape = parse_shape(spec)
        if not 1 <= len(shape) <= 3 or min(shape) <= 0:
            raise ValueError(f"--shape {spec!r}: expected 1 to 3 positive dims (C,H,W)")
        inputs[name] = shape
    raw = Path(args.param).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{args.param}: not a text .param file") from None
    param = parse_param_text(text, args.param)
    shapes = infer_shapes(param, inputs)
    missing = [n for n in param.input_names if n not in shapes]
    if missing:
        raise ValueError(
            f"no shape for input {missing[0]!r}: give --shape {missing[0]}=C,H,W "
            "(its Input layer declares none)"
        )
    out_text, hinted = write_hints(text, shapes, args.param)
    Path(args.out).write_bytes(out_text.encode("utf-8"))
    report = {
        "param": args.param,
        "out": args.out,
        "inputs": {n: list(shapes[n]) for n in param.input_names},
        "layers": len(param.layers),
        "layers_hinted": hinted,
        "blob_shapes": {n: list(s) for n, s in shapes.items()},
    }

    def text_out() -> None:
        print(f"{args.out}: shape hints on {hinted} of {len(param.layers)} layers")

    _print(args, report, text_out)
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    from ._runner import parse_input_shape
    from ._server import run_server

    if bool(args.cache_dir) != bool(args.graph_key):
        raise ValueError("--cache-dir and --graph-key go together")
    return run_server(
        args.param,
        args.bin,
        host=args.host,
        port=args.port,
        cache_dir=args.cache_dir,
        graph_key=args.graph_key,
        device=args.device,
        max_body=args.max_body,
        warm_up=dict(parse_input_shape(s) for s in args.warm_up),
        body_timeout=args.body_timeout,
        stay_up_on_load_error=args.stay_up_on_load_error,
        access_log=args.access_log,
    )


# -- parser -------------------------------------------------------------------------------------


def _model_args(p: argparse.ArgumentParser, *, cache: bool = True) -> None:
    p.add_argument("param", help="ncnn .param file")
    p.add_argument("bin", help="ncnn .bin file")
    if cache:
        p.add_argument("--cache", metavar="FILE", help="pipeline cache file to load and save")
        p.add_argument("--cache-dir", metavar="DIR", help="managed cache folder")
        p.add_argument("--graph-key", metavar="KEY", help="model key inside --cache-dir")
    p.add_argument("--device", type=int, default=None, help="Vulkan device index")
    p.add_argument("--cpu", action="store_true", help="run on the CPU (numpy) path")
    p.add_argument("--fp16", action="store_true", help="fp16 storage where supported")
    p.add_argument("--compile-threads", type=int, default=None)
    p.add_argument(
        "--shape-hints",
        action="store_true",
        help="bake the .param's shape hints (id 30, see 'asyncvk shapehint') into pipelines",
    )
    p.add_argument(
        "--must-hit", action="store_true", help="fail instead of compiling any shader cold"
    )
    p.add_argument("--json", action="store_true")
    p.add_argument(
        "--quiet", action="store_true", help="no progress bars (they show only on a terminal)"
    )


def _count(least: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``least``, else a one-line usage error."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, got {value}")
        return value

    return parse


class _Parser(argparse.ArgumentParser):
    """argparse, with a hint for an option value that starts with '-' (``--graph-key -rf``)."""

    def error(self, message: str) -> NoReturn:
        option = re.match(r"argument (--[\w-]+)(?:/-\w)?: expected one argument", message)
        if option:
            name = option.group(1)
            message += f" (a value that starts with '-' is written with '=': {name}=-VALUE)"
        super().error(message)


def build_parser() -> argparse.ArgumentParser:
    from ._version import __version__

    parser = _Parser(
        prog="asyncvk",
        description="Load ncnn models and run them on any Vulkan GPU, with a pipeline cache "
        "that makes cold starts fast. Every command takes --json; errors print one line and "
        "exit non-zero (--debug shows the traceback).",
    )
    parser.add_argument("--version", action="version", version=f"asyncvk {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)

    info = sub.add_parser("info", help="list Vulkan devices, capabilities and quirks")
    info.add_argument("--json", action="store_true")
    info.set_defaults(func=_cmd_info)

    layers = sub.add_parser("layers", help="the ncnn layer types asyncvk runs, GPU or CPU")
    layers_format = layers.add_mutually_exclusive_group()
    layers_format.add_argument("--json", action="store_true")
    layers_format.add_argument("--markdown", action="store_true", help="docs/layers.md")
    layers.set_defaults(func=_cmd_layers)

    run = sub.add_parser("run", help="load a model, run it once, write outputs")
    _model_args(run)
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    run.add_argument("--output", action="append", default=[], metavar="NAME=FILE.npy")
    run.set_defaults(func=_cmd_run)

    bench = sub.add_parser("bench", help="load timings and inference latency")
    _model_args(bench)
    bench.add_argument("--shape", action="append", default=[], metavar="NAME=C,H,W")
    bench.add_argument("--output", default=None, metavar="NAME")
    bench.add_argument("--loops", type=_count(1), default=10, help="timed runs (at least 1)")
    bench.add_argument("--warmup", type=_count(0), default=2, help="untimed runs first")
    bench.set_defaults(func=_cmd_bench)

    hint = sub.add_parser(
        "shapehint", help="write a .param with shape hints (id 30) for given input shapes"
    )
    hint.add_argument("param", help="ncnn .param file")
    hint.add_argument(
        "--shape", action="append", default=[], metavar="NAME=C,H,W", help="an input's shape"
    )
    hint.add_argument("-o", "--out", required=True, metavar="OUT.param")
    hint.add_argument("--json", action="store_true")
    hint.set_defaults(func=_cmd_shapehint)

    serve = sub.add_parser("serve", help="an HTTP inference server for one model")
    serve.add_argument("param")
    serve.add_argument("bin")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--cache-dir", metavar="DIR")
    serve.add_argument("--graph-key", metavar="KEY")
    serve.add_argument("--device", type=int, default=None)
    serve.add_argument("--max-body", type=int, default=64 << 20, help="bytes per request")
    serve.add_argument(
        "--stay-up-on-load-error",
        action="store_true",
        help="keep serving (/ready answers 500 with the error) when the model fails to load; "
        "by default the process exits with status 1 so that a supervisor restarts it",
    )
    serve.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one log line per request on stderr (default: on)",
    )
    serve.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a request body not received whole within this time is answered 408",
    )
    serve.add_argument(
        "--warm-up",
        action="append",
        default=[],
        metavar="NAME=C,H,W",
        help="run once on zeros of this shape before /ready: the first request then pays no "
        "plan build or shader compile",
    )
    serve.set_defaults(func=_cmd_serve, json=False)

    cache = sub.add_parser("cache", help="pipeline cache files and folders")
    csub = cache.add_subparsers(dest="cache_command", required=True)
    warm = csub.add_parser("warm", help="build every pipeline and save the cache")
    _model_args(warm)
    warm.add_argument("--shape", action="append", default=[], metavar="NAME=C,H,W")
    warm.add_argument("--output", default=None, metavar="NAME")
    warm.set_defaults(func=_cmd_cache_warm)
    inspect = csub.add_parser("inspect", help="header fields and entries of a cache file")
    inspect.add_argument("file")
    inspect.add_argument("--device", type=int, default=None)
    inspect.add_argument("--json", action="store_true")
    inspect.set_defaults(func=_cmd_cache_inspect)
    verify = csub.add_parser("verify", help="exit 0 if this device accepts every part of FILE")
    verify.add_argument("file")
    verify.add_argument("--device", type=int, default=None)
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(func=_cmd_cache_verify)
    ls = csub.add_parser("ls", help="list a cache folder: keys, devices, sizes, ages")
    ls.add_argument("dir")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=_cmd_cache_ls)
    prune = csub.add_parser("prune", help="apply the size cap and remove stale files")
    prune.add_argument("dir")
    prune.add_argument("--max-bytes", type=int, default=None)
    prune.add_argument("--json", action="store_true")
    prune.set_defaults(func=_cmd_cache_prune)
    return parser


#: Commands that load a model on the GPU: their device starts opening at once.
_DEVICE_COMMANDS: set[Callable[[argparse.Namespace], int]] = {
    _cmd_run,
    _cmd_bench,
    _cmd_cache_warm,
    _cmd_serve,
}


#: Set by main: True when the command must exit the ordinary way (serve).
_exit_plain: list[bool] = []


def main(argv: Sequence[str] | None = None, *, release_at_exit: bool = True) -> int:
    """Run one command; ``release_at_exit=False`` (the ``asyncvk`` program) leaves device
    memory and handles to the OS, once every cache file is saved."""
    _mark("main")
    parser = build_parser()
    args = parser.parse_args(argv)
    args.release_at_exit = release_at_exit
    _exit_plain.append(args.func is _cmd_serve)
    _start_opening_device(args)
    try:
        return int(args.func(args))
    except (AsyncVkError, OSError, ValueError, KeyError, MemoryError) as exc:
        if args.debug:
            raise
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"asyncvk: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def console_main() -> NoReturn:
    """The ``asyncvk`` program: :func:`main`, then exit without the interpreter's teardown.

    What must outlive the process is already on disk when ``main`` returns (cache files are
    written and fsynced before); freeing device memory, destroying Vulkan handles and
    collecting every module's objects is work the OS does anyway when the process ends.
    ``serve`` exits the ordinary way, after its own shutdown.
    """
    try:
        code = main(release_at_exit=False)
    except SystemExit as exc:  # argparse's --help and usage errors
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):  # a closed pipe: nothing more can be said
        code = code or 1
    if _exit_plain and _exit_plain[-1]:
        sys.exit(code)
    os._exit(code)


if __name__ == "__main__":
    console_main()
