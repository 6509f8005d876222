"""The ``asyncvk`` program: its arguments parsed, the device opened on a thread meanwhile, one
command run, and the exit without the interpreter's teardown (see the package docstring)."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import NoReturn

from .._errors import AsyncVkError
from ._parser import build_parser
from ._report import mark, terminal_safe
from ._run import cmd_bench, cmd_cache_warm, cmd_run
from ._serve import cmd_serve

#: Commands that load a model on the GPU: their device starts opening at once.
_DEVICE_COMMANDS: set[Callable[[argparse.Namespace], int]] = {
    cmd_run,
    cmd_bench,
    cmd_cache_warm,
    cmd_serve,
}


#: Commands that load the one model their arguments name: its weights are read at once.
_LOAD_COMMANDS: set[Callable[[argparse.Namespace], int]] = {cmd_run, cmd_bench, cmd_cache_warm}


# -- the device thread -------------------------------------------------------------------------


def _open_device(index: int | None) -> None:
    """Thread body: open the device that ``open_net`` will ask for. A failure here is left for
    that call to raise, where the user's command reports it."""
    try:
        # Neither gpu module imports numpy, so the driver loads and the device opens while the
        # main thread imports numpy and the rest.
        from ..gpu._instance import get_gpu_count

        if get_gpu_count() > 0:
            mark("instance_created")
            from ..gpu._device import get_gpu_device

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
        from ..cache._early_setup import set_up_early

        local = getattr(args, "cache", None), getattr(args, "cache_dir", None)
        if not set_up_early(getattr(args, "remote_cache", None), *local):
            return
        from ..shader._compiler import prepare_compiler

        prepare_compiler().join()
        mark("compiler_ready")
    except Exception:  # a broken install: the load's own compile reports it
        pass


def _will_compile(args: argparse.Namespace) -> bool:
    """Whether the command may compile GLSL: not when the install's SPIR-V folder holds every
    shader; else with no cache file to load (a cache folder may or may not hold this model),
    or for ``cache warm``. With a remote cache the set-up thread asks the store first
    (``set_up_early``)."""
    from ..shader._packaged import packaged_complete

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
    from ..gpu import _driver_load

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
        from ..net._weights_prefetch import start_reading

        start_reading(args.bin)


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
