"""``asyncvk shapehint``: write a .param with shape hints (id 30) for given input shapes."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ._report import print_report

if TYPE_CHECKING:
    from ..net._param_parser import LayerDecl


def cmd_shapehint(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..net._param_parser import parse_param_text
    from ..net._shape_hints import infer_shapes, write_hints
    from ._runner import parse_shape

    inputs: dict[str, tuple[int, ...]] = {}
    for spec in args.shape:
        name, shape = parse_shape(spec)
        if not 1 <= len(shape) <= 3 or min(shape) <= 0:
            raise ValueError(f"--shape {spec!r}: expected 1 to 3 positive dims (C,H,W)")
        inputs[name] = shape
    out = _target(args)
    raw = Path(args.param).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"{args.param}: not a text .param file") from None
    param = parse_param_text(text, args.param)
    why: dict[str, str] = {}
    shapes = infer_shapes(param, inputs, why)
    missing = [n for n in param.input_names if n not in shapes]
    if missing:
        raise ValueError(
            f"no shape for input {missing[0]!r}: give --shape {missing[0]}=C,H,W "
            "(its Input layer declares none)"
        )
    out_text, hinted = write_hints(text, shapes, args.param)
    hintable = [decl for decl in param.layers if decl.tops]
    if hinted < len(hintable) and not args.allow_partial:
        first = next(d for d in hintable if not _hinted(d.tops, shapes))
        raise ValueError(
            f"{args.param}: shape hints would cover {hinted} of {len(hintable)} layers; the "
            f"first without is layer {first.name!r} ({first.type}, line {first.line}): "
            f"{_reason(first, shapes, why)}. Nothing written (--allow-partial writes them anyway)"
        )
    Path(out).write_bytes(out_text.encode("utf-8"))
    report = {
        "param": args.param,
        "out": out,
        "inputs": {n: list(shapes[n]) for n in param.input_names},
        "layers": len(param.layers),
        "layers_hinted": hinted,
        "blob_shapes": {n: list(s) for n, s in shapes.items()},
    }

    def text_out() -> None:
        print(f"{out}: shape hints on {hinted} of {len(param.layers)} layers")

    print_report(args, report, text_out)
    return 0


def _target(args: argparse.Namespace) -> str:
    """Where the hinted .param goes: ``-o``, or the input itself with ``--in-place``, never the
    input by accident."""
    import os

    if args.in_place:
        if args.out is not None:
            raise ValueError("give either -o OUT.param or --in-place, not both")
        return str(args.param)
    if args.out is None:
        raise ValueError("give -o OUT.param (or --in-place to rewrite the input)")
    if os.path.abspath(args.out) == os.path.abspath(args.param) or (
        os.path.exists(args.out) and os.path.samefile(args.out, args.param)
    ):
        raise ValueError(
            f"-o {args.out} is the input itself; give another file, or --in-place to rewrite it"
        )
    return str(args.out)


def _hinted(tops: Sequence[str], shapes: dict[str, tuple[int, ...]]) -> bool:
    return all(t in shapes and 1 <= len(shapes[t]) <= 3 for t in tops)


def _reason(decl: LayerDecl, shapes: dict[str, tuple[int, ...]], why: dict[str, str]) -> str:
    """Why a layer has no hint: its shape rule refused, an input has no shape, or a top has
    more dims than a hint holds."""
    if decl.name in why:
        return why[decl.name]
    tops = decl.tops
    unknown = [b for b in decl.bottoms if b not in shapes]
    if unknown:
        return f"its input blob {unknown[0]!r} has no known shape"
    wide = next((t for t in tops if t in shapes and len(shapes[t]) > 3), None)
    if wide is not None:
        return f"its output {wide!r} has {len(shapes[wide])} dims; a hint holds 1 to 3"
    return "its outputs have no known shape"
