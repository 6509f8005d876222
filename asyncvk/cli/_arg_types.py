"""The command line's argument types and the arguments several commands share."""

from __future__ import annotations

import argparse
from collections.abc import Callable

# -- parser -------------------------------------------------------------------------------------


def model_args(
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
        remote_cache_arg(p)
    p.add_argument(
        "--device",
        type=device_choice,
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
    p.add_argument("--compile-threads", type=count(1), default=None)
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


def remote_cache_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--remote-cache",
        metavar="URL",
        default=None,
        help="shared pipeline cache behind the local one, redis://HOST:PORT/DB "
        "(default: $ASYNCVK_REMOTE_CACHE; signing key: $ASYNCVK_REMOTE_CACHE_KEY)",
    )


def count(least: int) -> Callable[[str], int]:
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


def device_list(text: str) -> list[int] | str:
    """An argparse type: ``all``, or device indices separated by commas (``0,1``; an index may
    repeat: two members on one GPU)."""
    if text.strip().lower() == "all":
        return "all"
    indices = []
    for part in text.split(","):
        try:
            value = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{part.strip()!r} in {text!r} is not a device index (give 'all' or 0,1,...)"
            ) from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"device indices are 0 or more, got {value}")
        indices.append(value)
    return indices


def device_choice(text: str) -> int | str:
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


def port(text: str) -> int:
    """An argparse type: a TCP port, 0 (any free one) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {value}")
    return value


def host(text: str) -> str:
    """An argparse type: an address or a name this machine can resolve."""
    import socket

    try:
        socket.getaddrinfo(text, None)
    except (OSError, UnicodeError) as exc:
        reason = getattr(exc, "strerror", None) or exc
        raise argparse.ArgumentTypeError(f"cannot listen on {text!r}: {reason}") from None
    return text
