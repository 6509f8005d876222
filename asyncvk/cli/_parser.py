"""The ``asyncvk`` command line's arguments: every command and option, with its help."""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any, NoReturn, TypeAlias

from ._arg_types import count, model_args
from ._cache import cmd_cache_inspect, cmd_cache_ls, cmd_cache_prune, cmd_cache_verify
from ._info import cmd_info, cmd_layers
from ._remote import cmd_cache_pull, cmd_cache_push
from ._run import cmd_bench, cmd_cache_warm, cmd_run
from ._serve_args import add_serve_command
from ._shapehint import cmd_shapehint

# -- parser -------------------------------------------------------------------------------------


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
    from .._version import __version__

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
    add_serve_command(sub)
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
    model_args(run, random_weights=True)
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
    model_args(bench, random_weights=True)
    bench.add_argument("--shape", action="append", default=[], metavar="NAME=C,H,W")
    bench.add_argument(
        "--output",
        action="append",
        default=[],
        metavar="NAME",
        help="an output to compute; none: every output of the model",
    )
    bench.add_argument(
        "--batch", type=count(1), default=None, help="items per run (inputs get a batch axis)"
    )
    bench.add_argument("--loops", type=count(1), default=10, help="timed runs (at least 1)")
    bench.add_argument("--warmup", type=count(0), default=2, help="untimed runs first")
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


def _add_cache_commands(sub: _Subparsers) -> None:
    """``cache warm / inspect / verify / ls / prune / push / pull``."""
    cache = sub.add_parser("cache", help="pipeline cache files and folders")
    csub = cache.add_subparsers(dest="cache_command", required=True)
    warm = csub.add_parser("warm", help="build every pipeline and save the cache")
    model_args(warm)
    warm.add_argument("--shape", action="append", default=[], metavar="NAME=C,H,W")
    warm.add_argument("--output", default=None, metavar="NAME")
    warm.set_defaults(func=cmd_cache_warm)
    inspect = csub.add_parser("inspect", help="header fields and entries of a cache file")
    inspect.add_argument("file")
    inspect.add_argument("--device", type=count(0), default=None)
    inspect.add_argument("--json", action="store_true")
    inspect.set_defaults(func=cmd_cache_inspect)
    verify = csub.add_parser("verify", help="exit 0 if this device accepts every part of FILE")
    verify.add_argument("file")
    verify.add_argument("--device", type=count(0), default=None)
    verify.add_argument("--json", action="store_true")
    verify.set_defaults(func=cmd_cache_verify)
    ls = csub.add_parser("ls", help="list a cache folder: keys, devices, sizes, ages")
    ls.add_argument("dir")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_cache_ls)
    prune = csub.add_parser("prune", help="apply the size cap and remove stale files")
    prune.add_argument("dir")
    prune.add_argument("--max-bytes", type=count(0), default=None)
    prune.add_argument("--json", action="store_true")
    prune.set_defaults(func=cmd_cache_prune)
    for name, func, help_text in (
        ("push", cmd_cache_push, "write FILE's entries and driver blob to a remote cache"),
        ("pull", cmd_cache_pull, "merge what a remote cache holds for this device into FILE"),
    ):
        remote = csub.add_parser(name, help=help_text)
        remote.add_argument("file")
        remote.add_argument("--remote", required=True, metavar="URL", help="redis://HOST:PORT/DB")
        remote.add_argument("--device", type=count(0), default=None)
        remote.add_argument("--json", action="store_true")
        remote.set_defaults(func=func)
