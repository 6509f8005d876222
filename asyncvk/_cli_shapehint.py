"""``asyncvk shapehint``: write a .param with shape hints (id 30) for given input shapes."""

from __future__ import annotations

import argparse

from ._cli_report import print_report


def cmd_shapehint(args: argparse.Namespace) -> int:
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

    print_report(args, report, text_out)
    return 0
