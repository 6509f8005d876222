"""Weights and inputs for ncnn's own benchmark models, so both runtimes can load and run them.

    python benchmarks/suite_models.py --out DIR [--params tests/ncnn_benchmark] [--models a,b]
        [--ci-sizes]

Upstream ships the ``.param`` files only (``benchncnn`` feeds zeros). For each one this writes
``DIR/NAME/model.param`` (a copy), ``model.bin``, ``input.npy`` and ``meta.json`` (input blob,
``output``: the last output blob, ``outputs``: all of them, ``input_shape``), in the layout
``tests/models`` uses. Weights and inputs are ``tests/ncnn_suite.py``'s, the ones the suite
test uses: the ``.bin`` layout is what the ``ncnn`` wheel reads (recorded read by read), the
values are seeded and scaled per role so activations stay sane through deep nets, and the
logits that softmax or a detection layer reads are calibrated. Inputs are at benchncnn's sizes,
or with ``--ci-sizes`` at the smaller ones the CI suite uses. Needs the ``ncnn`` wheel.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from ncnn_suite import BENCH_SHAPES, SUITE_DIR, write_model  # noqa: E402

DEFAULT_PARAMS = SUITE_DIR


def _graph(param: Path) -> tuple[str, tuple[int, ...], str]:
    """(input blob, input shape c,h,w, last output blob) from the param text, reading only the
    layer count line 2 declares (as ncnn does). ``suite_int8.py`` uses it."""
    lines = param.read_text().splitlines()
    count = int(lines[1].split()[0])
    produced: list[str] = []
    consumed: set[str] = set()
    input_name, shape = "", BENCH_SHAPES.get(param.stem, ())
    for line in lines[2 : 2 + count]:
        fields = line.split()
        kind, n_in, n_out = fields[0], int(fields[2]), int(fields[3])
        bottoms, tops = fields[4 : 4 + n_in], fields[4 + n_in : 4 + n_in + n_out]
        consumed.update(bottoms)
        produced += tops
        if kind == "Input" and not input_name:
            input_name = tops[0]
            values = dict(f.split("=", 1) for f in fields[4 + n_in + n_out :])
            w, h, c = (int(values.get(k, 0)) for k in ("0", "1", "2"))
            if w and h and c:
                shape = (c, h, w)
    outputs = [b for b in produced if b not in consumed]
    if not input_name or not shape or not outputs:
        raise ValueError(f"{param}: no input shape or no output blob")
    return input_name, shape, outputs[-1]


def make(param: Path, out: Path, native: bool = True) -> dict[str, Any]:
    folder = out / param.stem
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob(f"{param.stem}-*.bin"):
        old.unlink()
    model = write_model(param, folder, native=native)
    shutil.copyfile(param, folder / "model.param")
    model.bin.replace(folder / "model.bin")
    np.save(folder / "input.npy", model.input)
    meta = {
        "input": model.input_name,
        "output": model.outputs[-1],
        "outputs": list(model.outputs),
        "input_shape": list(model.input.shape),
    }
    (folder / "meta.json").write_text(json.dumps(meta) + "\n")
    return {"model": param.stem, **meta, "bin_bytes": (folder / "model.bin").stat().st_size}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=DEFAULT_PARAMS)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="", help="comma-separated stems (default: all)")
    parser.add_argument("--ci-sizes", action="store_true", help="the CI suite's input sizes")
    args = parser.parse_args(argv)
    wanted = set(filter(None, args.models.split(",")))
    for param in sorted(args.params.glob("*.param")):
        if wanted and param.stem not in wanted:
            continue
        try:
            print(json.dumps(make(param, args.out, native=not args.ci_sizes)))
        except ValueError as exc:
            print(json.dumps({"model": param.stem, "error": str(exc)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
