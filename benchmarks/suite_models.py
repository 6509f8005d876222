"""Weights and inputs for ncnn's own benchmark models, so both runtimes can load and run them.

    python benchmarks/suite_models.py --out DIR [--params ../shared/ncnn-benchmark]

Upstream ships the ``.param`` files only (``benchncnn`` feeds zeros). For each one this writes
``DIR/NAME/model.param`` (a copy), ``model.bin``, ``input.npy`` and ``meta.json`` (input and
output blob names), in the layout ``tests/models`` uses. The ``.bin`` layout is ncnn's own: the
``ncnn`` wheel loads the param and reads its weights through a DataReader that records every
read, so each buffer has the size and order ncnn asks for. Every 4-byte read is written as
zero (the fp32 tag of a weight, or a one-value weight); the rest are seeded uniform floats in
[-0.05, 0.05), the same on every machine. Needs the ``ncnn`` wheel.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PARAMS = ROOT.parent / "shared" / "ncnn-benchmark"
#: Input sizes (c, h, w) that benchncnn uses where a param's Input layer declares none.
INPUT_SHAPES = {"FastestDet": (3, 352, 352), "vision_transformer": (3, 384, 384)}

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _weights(param: Path) -> bytes:
    """The .bin ncnn reads for ``param``: what each of its reads asked for, in order."""
    import ncnn

    rng = np.random.default_rng(0)
    chunks: list[bytes] = []

    class Recorder(ncnn.DataReader):  # type: ignore[misc]
        def scan(self, format: str, p: Any) -> int:
            return 0

        def read(self, buf: Any, size: int) -> int:
            if size == 4:
                data = bytes(4)
            else:
                floats = rng.uniform(-0.05, 0.05, size // 4).astype(np.float32)
                data = floats.tobytes() + bytes(size % 4)
            ctypes.memmove(_capsule_pointer(buf, None), data, size)
            chunks.append(data)
            return size

    net = ncnn.Net()
    net.opt.use_vulkan_compute = False
    if net.load_param(str(param)) != 0:
        raise ValueError(f"{param}: ncnn cannot load it")
    if net.load_model(Recorder()) != 0:
        raise ValueError(f"{param}: ncnn cannot read its weights")
    return b"".join(chunks)


def _graph(param: Path) -> tuple[str, tuple[int, ...], str]:
    """(input blob, input shape c,h,w, last output blob) from the param text, reading only the
    layer count line 2 declares (as ncnn does)."""
    lines = param.read_text().splitlines()
    count = int(lines[1].split()[0])
    produced: list[str] = []
    consumed: set[str] = set()
    input_name, shape = "", INPUT_SHAPES.get(param.stem, ())
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


def make(param: Path, out: Path) -> dict[str, Any]:
    folder = out / param.stem
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(param, folder / "model.param")
    (folder / "model.bin").write_bytes(_weights(param))
    input_name, shape, output_name = _graph(param)
    x = np.random.default_rng(1).uniform(-1, 1, shape).astype(np.float32)
    np.save(folder / "input.npy", x)
    meta = {"input": input_name, "output": output_name, "input_shape": list(shape)}
    (folder / "meta.json").write_text(json.dumps(meta) + "\n")
    return {"model": param.stem, **meta, "bin_bytes": (folder / "model.bin").stat().st_size}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=DEFAULT_PARAMS)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--models", default="", help="comma-separated stems (default: all)")
    args = parser.parse_args(argv)
    wanted = set(filter(None, args.models.split(",")))
    for param in sorted(args.params.glob("*.param")):
        if wanted and param.stem not in wanted:
            continue
        try:
            print(json.dumps(make(param, args.out)))
        except ValueError as exc:
            print(json.dumps({"model": param.stem, "error": str(exc)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
