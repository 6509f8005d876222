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
import os
import re
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TypeAlias

from ._cli_cache import cmd_cache_inspect, cmd_cache_ls, cmd_cache_prune, cmd_cache_verify
from ._cli_info import cmd_info, cmd_layers
from ._cli_remote import cmd_cache_pull, cmd_cache_push
from ._cli_report import mark, terminal_safe
from ._cli_run import cmd_bench, cmd_cache_warm, cmd_run, cmd_serve
from ._cli_shapehint import cmd_shapehint
from ._errors import AsyncVkError

# -- the device thread -------------------------------------------------------------------------


def _open_device(index: int | None) -> None:
    """Thread body: open the device that ``open_net`` will ask for. A failure here is left for
    that call to raise, where the user's command reports it."""
    try:
        # Neither gpu module imports numpy, so the driver loads and the device opens while the
        # main thread imports numpy and the rest.
        from .gpu._instance import get_gpu_count

        if get_gpu_count() > 0:
            mark("instance_created")
            from .gpu._device import get_gpu_device

            get_gpu_device(index)
            mark("device_opened")
    except Exception:  # the main thread's own call raises it
        pass


def _prepare_compiler(args: argparse.Namespace) -> None:
    """Thread body: glslang's one-time set-up (the compiler's first compile, about 80 ms in C
    with the GIL released). ``open_net`` starting it after the imports put it on a cold load's
    critical path: every compile of the load waited for it. With a remote cache that answers,
    none (``set_up_early``)."""
    try:
        from .cache._early_setup import set_up_early

        local = getattr(args, "cache", None), getattr(args, "cache_dir", None)
        if not set_up_early(getattr(args, "remote_cache", None), *local):
            return
        from .shader._compiler import prepare_compiler

        prepare_compiler().join()
        mark("compiler_ready")
    except Exception:  # a broken install: the load's own compile reports it
        pass


def _will_compile(args: argparse.Namespace) -> bool:
    """Whether the command may compile GLSL: not when the install's SPIR-V folder holds every
    shader; else with no cache file to load (a cache folder may or may not hold this model),
    or for ``cache warm``. With a remote cache the set-up thread asks the store first
    (``set_up_early``)."""
    from .shader._packaged import packaged_complete

    if packaged_complete():
        return False
    cache = getattr(args, "cache", None)
    return args.func is cmd_cache_warm or cache is None or not os.path.exists(cache)


def _start_opening_device(args: argparse.Namespace) -> None:
    """For commands that load a model on the GPU: open the device now, on a thread, while this
    thread imports numpy and asyncvk. ``get_gpu_device`` joins it (gpu's own locks). A run that
    will compile starts the compiler's set-up beside it."""
    if getattr(args, "device", None) == "cpu":
        args.cpu, args.device = True, None  # one spelling downstream: --cpu
    if args.func not in _DEVICE_COMMANDS or getattr(args, "cpu", False):
        return
    if getattr(args, "workers", 1) > 1:
        return  # the workers open their own; this process only watches them
    from .gpu import _driver_load

    _driver_load.start()
    threading.Thread(
        target=_open_device, args=(args.device,), name="asyncvk-open-device", daemon=True
    ).start()
    if _will_compile(args):
        threading.Thread(
            target=_prepare_compiler,
            args=(args,),
            name="asyncvk-prepare-compiler",
            daemon=True,
        ).start()


def _start_reading_weights(args: argparse.Namespace) -> None:
    """For commands that load one model: read its ``.bin`` now, on a thread, beside the imports
    (the load takes the bytes if the file is unchanged since; see ``net._weights_prefetch``)."""
    if args.func in _LOAD_COMMANDS and isinstance(getattr(args, "bin", None), str):
        from .net._weights_prefetch import start_reading

        start_reading(args.bin)


# -- parser -------------------------------------------------------------------------------------


def _model_args(
    p: argparse.ArgumentParser, *, cache: bool = True, random_weights: bool = False
) -> None:
    p.add_argument("param", help="ncnn .param file")
    if random_weights:
        p.add_argument("bin", nargs="?", help="ncnn .bin file (or --random-weights)")
        p.add_argument(
            "--random-weights",
            action="store_true",
            help="no .bin: seeded random weights in the layout ncnn reads (as benchncnn does)",
        )
    else:
        p.add_argument("bin", help="ncnn .bin file")
    if cache:
        p.add_argument("--cache", metavar="FILE", help="pipeline cache file to load and save")
        p.add_argument("--cache-dir", metavar="DIR", help="managed cache folder")
        p.add_argument("--graph-key", metavar="KEY", help="model key inside --cache-dir")
        _remote_cache_arg(p)
    p.add_argument(
        "--device",
        type=_device_choice,
        default=None,
        help="Vulkan device index, or 'cpu' for the CPU (numpy) path",
    )
    p.add_argument("--cpu", action="store_true", help="run on the CPU (numpy) path")
    p.add_argument("--fp16", action="store_true", help="fp16 storage where supported")
    p.add_argument(
        "--fp16-arith",
        action="store_true",
        help="fp16 operands, fp32 sums: convolutions on the matrix units where the device has them",
    )
    p.add_argument("--compile-threads", type=_count(1), default=None)
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


def _remote_cache_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--remote-cache",
        metavar="URL",
        default=None,
        help="shared pipeline cache behind the local one, redis://HOST:PORT/DB "
        "(default: $ASYNCVK_REMOTE_CACHE; signing key: $ASYNCVK_REMOTE_CACHE_KEY)",
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


def _device_choice(text: str) -> int | str:
    """An argparse type: a device index (0 or more), or ``cpu``."""
    if text.strip().lower() == "cpu":
        return "cpu"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a device index nor 'cpu'") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a device index is 0 or more, got {value}")
    return value


def _port(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {value}")
    return value


def _host(text: str) -> str:
    """An argparse type: an address or a name this machine can resolve."""
    import socket

    try:
        socket.getaddrinfo(text, None)
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise argparse.ArgumentTypeError(f"cannot listen on {text!r}: {reason}") from None
    return text


def _terminal_columns() -> int:
    """``shutil.get_terminal_size().columns``: $COLUMNS, else the terminal's width, else 80."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, sized as argparse sizes it but without importing shutil: argparse
    makes one per argument added, and shutil with zlib, bz2 and lzma cost every command's
    start 3 ms on lavapipe's machine."""

    def __init__(
        self,
        prog: str,
        indent_increment: int = 2,
        max_help_position: int = 24,
        width: int | None = None,
        **kwargs: Any,
    ) -> None:
        if width is None:
            width = _terminal_columns() - 2
        super().__init__(prog, indent_increment, max_help_position, width, **kwargs)


class _Parser(argparse.ArgumentParser):
    """argparse, with a hint for an option value that starts with '-' (``--graph-key -rf``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _HelpFormatter)
        super().__init__(*args, **kwargs)

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
        description="Load ncnn models and run them on any Vulkan GPU, starting fast: shaders "
        "compiled at install, pipelines built concurrently, a pipeline cache for fresh machines "
        "and fleets. Every command takes --json; errors print one line and exit non-zero "
        "(--debug shows the traceback).",
    )
    parser.add_argument("--version", action="version", version=f"asyncvk {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_info_commands(sub)
    _add_model_commands(sub)
    _add_serve_command(sub)
    _add_cache_commands(sub)
    return parser


#: What ``add_subparsers`` returns (argparse keeps the class private).
_Subparsers: TypeAlias = "argparse._SubParsersAction[_Parser]"


def _add_info_commands(sub: _Subparsers) -> None:
    """``info`` and ``layers``: what the machine and asyncvk offer."""
    info = sub.add_parser("info", help="list Vulkan devices, capabilities and quirks")
    info.add_argument("--json", action="store_true")
    info.set_defaults(func=cmd_info)

    layers = sub.add_parser("layers", help="the ncnn layer types asyncvk runs, GPU or CPU")
    layers_format = layers.add_mutually_exclusive_group()
    layers_format.add_argument("--json", action="store_true")
    layers_format.add_argument("--markdown", action="store_true", help="docs/layers.md")
    layers.set_defaults(func=cmd_layers)


def _add_model_commands(sub: _Subparsers) -> None:
    """``run``, ``bench`` and ``shapehint``: one model, from the command line."""
    run = sub.add_parser("run", help="load a model, run it once, write outputs")
    _model_args(run, random_weights=True)
    run.add_argument("--input", action="append", default=[], metavar="NAME=FILE.npy")
    run.add_argument(
        "--output",
        action="append",
        default=[],
        metavar="NAME[=PATH]",
        help="an output to compute (and write to PATH); none: every output of the model",
    )
    run.add_argument(
        "--output-dir", metavar="DIR", help="write every output computed to DIR/NAME.npy"
    )
    run.set_defaults(func=cmd_run)

    bench = sub.add_parser("bench", help="load timings and inference latency")
    _model_args(bench, random_weights=True)
    bench.add_argument("--shape", action="append", default=[], metavar="NAME=C,H,W")
    bench.add_argument(
        "--output",
        action="append",
        default=[],
        metavar="NAME",
        help="an output to compute; none: every output of the model",
    )
    bench.add_argument(
        "--batch", type=_count(1), default=None, help="items per run (inputs get a batch axis)"
    )
    bench.add_argument("--loops", type=_count(1), default=10, help="timed runs (at least 1)")
    bench.add_argument("--warmup", type=_count(0), default=2, help="untimed runs first")
    bench.set_defaults(func=cmd_bench)

    hint = sub.add_parser(
        "shapehint", help="write a .param with shape hints (id 30) for given input shapes"
    )
    hint.add_argument("param", help="ncnn .param file")
    hint.add_argument(
        "--shape", action="append", default=[], metavar="NAME=C,H,W", help="an input's shape"
    )
    hint.add_argument("-o", "--out", default=None, metavar="OUT.param")
    hint.add_argument(
        "--in-place", action="store_true", help="rewrite PARAM itself instead of writing -o"
    )
    hint.add_argument(
        "--allow-partial",
        action="store_true",
        help="write the hints even when some layers cannot have one (by default: exit 1)",
    )
    hint.add_argument("--json", action="store_true")
    hint.set_defaults(func=cmd_shapehint)


def _add_serve_command(sub: _Subparsers) -> None:
    """``serve``: an HTTP inference server for one model or a folder of them."""
    serve = sub.add_parser(
        "serve", help="an HTTP inference server (Open Inference Protocol) for one or more models"
    )
    serve.add_argument("param", nargs="?", help="the model's .param (or --models DIR)")
    serve.add_argument("bin", nargs="?", help="the model's .bin")
    serve.add_argument(
        "--models", metavar="DIR", help="serve every DIR/NAME/model.param + model.bin as NAME"
    )
    serve.add_argument(
        "--name", help="the model's name in URLs (default: the .param's name, or its folder's)"
    )
    serve.add_argument(
        "--workers",
        type=_count(1),
        default=1,
        metavar="N",
        help="server processes on the one port (SO_REUSEPORT), each with its own batcher, "
        "sharing the GPU and the cache's files (default: 1)",
    )
    serve.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    serve.add_argument(
        "--warm-up-batches",
        action="store_true",
        help="with --warm-up: record the plan of every batch size the batcher makes (powers of "
        "two up to --max-batch) before /ready, so a first burst records none",
    )
    serve.add_argument(
        "--poll-models",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="with --models: load new NAME folders, reload changed models and unload removed "
        "ones this often (default: 0, never; the repository API still loads and unloads)",
    )
    serve.add_argument(
        "--max-batch",
        type=_count(1),
        default=32,
        metavar="N",
        help="items that concurrent requests may join into one GPU submission (default: 32)",
    )
    serve.add_argument(
        "--max-batch-bytes",
        type=_count(1),
        default=256 << 20,
        metavar="BYTES",
        help="device memory a batch's blobs may take: batches of larger items hold fewer "
        "(default: 256 MiB)",
    )
    serve.add_argument(
        "--max-queue-delay-us",
        type=_count(0),
        default=0,
        metavar="US",
        help="microseconds a request may wait for others to join its batch (default: 0: none; "
        "batches still form from what arrives while the GPU is busy)",
    )
    serve.add_argument(
        "--max-inflight",
        type=_count(1),
        default=2,
        metavar="N",
        help="batches of one model on the GPU at once (default: 2)",
    )
    serve.add_argument("--host", type=_host, default="127.0.0.1")
    serve.add_argument("--port", type=_port, default=8080, help="0: any free port")
    serve.add_argument("--cache-dir", metavar="DIR")
    serve.add_argument("--graph-key", metavar="KEY")
    _remote_cache_arg(serve)
    serve.add_argument("--device", type=_count(0), default=None, help="Vulkan device index")
    serve.add_argument("--max-body", type=_count(1), default=64 << 20, help="bytes per request")
    serve.add_argument(
        "--stay-up-on-load-error",
        action="store_true",
        help="keep serving (/ready answers 500 with the error) when the model fails to load; "
        "by default the process exits with status 1 so that a supervisor restarts it",
    )
    serve.add_argument(
        "--grpc-port",
        type=_count(0),
        default=None,
        metavar="PORT",
        help="serve the protocol over gRPC on this port of --host too (0: any free port; "
        "needs grpcio: pip install asyncvk-runtime[grpc])",
    )
    serve.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="one log line per request on stderr (default: off; it costs about 0.15 ms a request)",
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
    serve.add_argument(
        "--max-plans-per-shape",
        type=_count(1),
        default=4,
        metavar="N",
        help="inferences of one input shape that run at once, each with its own blob memory; "
        "more wait for one to end (default: 4)",
    )
    serve.add_argument(
        "--max-queue",
        type=_count(0),
        default=256,
        metavar="N",
        help="requests that may wait per model; beyond it, 503 with Retry-After (default: 256)",
    )
    serve.add_argument(
        "--idle-plans-per-shape",
        type=_count(0),
        default=1,
        metavar="N",
        help="plans kept per input shape once a burst is over (default: 1)",
    )
    serve.add_argument(
        "--plan-idle-seconds",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="a plan unused this long is released, with its memory (default: 2)",
    )
    serve.set_defaults(func=cmd_serve, json=False)


def _add_cache_commands(sub: _Subparsers) -> None:
    """``cache warm / inspect / verify / ls / prune / push / pull``."""
    cache = sub.add_parser("cache", help="pipeline cache files and folders")
    csub = cache.add_subparsers(dest="cache_command", required=True)
    warm = csub.add_parser("warm", help="build every pipeline and save the cache")
    _model_args(warm)
    warm.add_argument("--shape", action="append", default=[], metavar="NAME=C,H,W")
    warm.add_argument("--output", default=None, metavar="NAME")
    warm.set_defaults(func=cmd_cache_warm)
    inspect = csub.add_parser("inspect", help="header fields and entries of a cache file")
    inspect.add_argument("file")
    inspect.add_argument("--device", type=_count(0), default=None)
    inspect.add_argument("--json", action="store_true")
    inspect.set_defaults(func=cmd_cache_inspect)
    verify = csub.add_parser("verify", help="exit 0 if this device accepts every part of FILE")
    verify.add_argument("file")
    verify.add_argument("--device", type=_count(0), default=None)
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(func=cmd_cache_verify)
    ls = csub.add_parser("ls", help="list a cache folder: keys, devices, sizes, ages")
    ls.add_argument("dir")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_cache_ls)
    prune = csub.add_parser("prune", help="apply the size cap and remove stale files")
    prune.add_argument("dir")
    prune.add_argument("--max-bytes", type=_count(0), default=None)
    prune.add_argument("--json", action="store_true")
    prune.set_defaults(func=cmd_cache_prune)
    for name, func, help_text in (
        ("push", cmd_cache_push, "write FILE's entries and driver blob to a remote cache"),
        ("pull", cmd_cache_pull, "merge what a remote cache holds for this device into FILE"),
    ):
        remote = csub.add_parser(name, help=help_text)
        remote.add_argument("file")
        remote.add_argument("--remote", required=True, metavar="URL", help="redis://HOST:PORT/DB")
        remote.add_argument("--device", type=_count(0), default=None)
        remote.add_argument("--json", action="store_true")
        remote.set_defaults(func=func)


#: Commands that load a model on the GPU: their device starts opening at once.
_DEVICE_COMMANDS: set[Callable[[argparse.Namespace], int]] = {
    cmd_run,
    cmd_bench,
    cmd_cache_warm,
    cmd_serve,
}


#: Commands that load the one model their arguments name: its weights are read at once.
_LOAD_COMMANDS: set[Callable[[argparse.Namespace], int]] = {cmd_run, cmd_bench, cmd_cache_warm}

#: Set by main: True when the command must exit the ordinary way (serve).
_exit_plain: list[bool] = []


def _debug_first(argv: Sequence[str]) -> list[str]:
    """``--debug`` is a program option, but a user types it anywhere: move it to the front."""
    rest = [arg for arg in argv if arg != "--debug"]
    return ["--debug", *rest] if len(rest) < len(argv) else list(argv)


def _message(exc: BaseException) -> str:
    """What the user reads for ``exc``: OS errors in words, a KeyError without its quotes."""
    if isinstance(exc, OSError):
        from ._os_words import describe_os_error

        return describe_os_error(exc)
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    return str(exc)


def main(argv: Sequence[str] | None = None, *, release_at_exit: bool = True) -> int:
    """Run one command; ``release_at_exit=False`` (the ``asyncvk`` program) leaves device
    memory and handles to the OS, once every cache file is saved."""
    mark("main")
    parser = build_parser()
    given = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(_debug_first(given))
    args.argv = given
    args.release_at_exit = release_at_exit
    _exit_plain.append(args.func is cmd_serve)
    _start_opening_device(args)
    _start_reading_weights(args)
    try:
        return int(args.func(args))
    except (AsyncVkError, OSError, ValueError, KeyError, MemoryError) as exc:
        if args.debug:
            raise
        print(terminal_safe(f"asyncvk: error: {_message(exc)}"), file=sys.stderr)
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
