"""Weights with real int8 data and calibrated scales for ncnn's int8 benchmark models.

    python benchmarks/suite_int8.py --out DIR [--params tests/ncnn_benchmark/int8] [--models a,b]

Upstream ships the ``*_int8.param`` files only. For each one this writes ``DIR/NAME/model.param``
(a copy), ``model.bin``, ``input.npy`` and ``meta.json`` in the layout of ``suite_models.py``.
The ``.bin`` is what ncnn2int8 would write: every layer with param 8 ``int8_scale_term`` gets its
weight as int8 data (tag 0x000D4B38, alignSize(w, 4) bytes), its bias, its weight scales (per
output channel; per group or one for ConvolutionDepthWise 1/101 and 2/102), the bottom scale and,
past 100, the top scale; the other layers get float32.

The scales are calibrated as ncnn2int8's max method does: seeded He-uniform float weights are
run through ncnn in float32 (the param with its int8 terms removed) on the model's input, each
int8 layer's bottom scale is 127 / max|input| and its top scale 127 / max|output| (so a layer's
top scale is its consumer's bottom scale), and each weight scale 127 / max|weight row|. Only the
layer types of the eight int8 models are known here. Needs the ``ncnn`` wheel.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from suite_models import _graph

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_PARAMS = ROOT / "tests" / "ncnn_benchmark" / "int8"
TAG_INT8 = (0x000D4B38).to_bytes(4, "little")
TAG_FP32 = bytes(4)
#: Types of the eight models that read no weights.
WEIGHTLESS = {
    "Input", "Pooling", "Split", "Concat", "LRN", "Softmax", "Flatten", "Permute", "PriorBox",
    "Reshape", "DetectionOutput", "ReLU", "Eltwise", "Dropout",
}  # fmt: skip
INT8_TYPES = {"Convolution", "ConvolutionDepthWise", "InnerProduct"}


@dataclass
class LayerLine:
    """One layer line of a .param: what this script needs of it."""

    type: str
    name: str
    bottoms: list[str]
    tops: list[str]
    params: dict[str, str]
    #: the float weights in ncnn's read order, filled by ``_float_weights``
    arrays: list[np.ndarray] = field(default_factory=list)

    def int_param(self, key: str, default: int = 0) -> int:
        return int(self.params.get(key, default))

    @property
    def int8_term(self) -> int:
        return self.int_param("8") if self.type in INT8_TYPES else 0


def _layers(param_text: str) -> list[LayerLine]:
    lines = param_text.splitlines()
    count = int(lines[1].split()[0])
    out = []
    for line in lines[2 : 2 + count]:
        f = line.split()
        n_in, n_out = int(f[2]), int(f[3])
        params = dict(p.split("=", 1) for p in f[4 + n_in + n_out :])
        out.append(LayerLine(f[0], f[1], f[4 : 4 + n_in], f[4 + n_in : 4 + n_in + n_out], params))
    return out


def _float_weights(layer: LayerLine, rng: np.random.Generator) -> None:
    """Seeded float weights: He-uniform for the products (activations keep their size through
    the depth), small biases, BatchNorm statistics near identity."""
    if layer.type in WEIGHTLESS:
        return
    if layer.type in INT8_TYPES:
        num_output = layer.int_param("0")
        size = layer.int_param("2" if layer.type == "InnerProduct" else "6")
        fan_in = size // num_output  # in_c / group * kernel area, or num_input
        limit = np.sqrt(6.0 / max(1, fan_in))
        layer.arrays.append(rng.uniform(-limit, limit, size).astype(np.float32))
        bias_id = "1" if layer.type == "InnerProduct" else "5"
        if layer.int_param(bias_id):
            layer.arrays.append(rng.uniform(-0.1, 0.1, num_output).astype(np.float32))
        return
    if layer.type == "BatchNorm":
        c = layer.int_param("0")
        layer.arrays += [
            rng.uniform(0.8, 1.2, c).astype(np.float32),  # slope
            rng.uniform(-0.1, 0.1, c).astype(np.float32),  # mean
            rng.uniform(0.8, 1.2, c).astype(np.float32),  # var
            rng.uniform(-0.1, 0.1, c).astype(np.float32),  # bias
        ]
        return
    raise ValueError(f"layer {layer.name}: {layer.type} weights are not known to suite_int8")


def _float_bin(layers: list[LayerLine]) -> bytes:
    """The .bin of the param with its int8 terms removed: float32 everywhere."""
    chunks = []
    for layer in layers:
        for i, a in enumerate(layer.arrays):
            tagged = layer.type in INT8_TYPES and i == 0  # the weight: load(w, 0)
            chunks.append((TAG_FP32 if tagged else b"") + a.tobytes())
    return b"".join(chunks)


def _float_param(param_text: str) -> str:
    """``param_text`` with param 8 dropped from the int8-capable layers."""
    lines = param_text.splitlines()
    for i, line in enumerate(lines):
        fields = line.split()
        if fields and fields[0] in INT8_TYPES:
            lines[i] = " ".join(f for f in fields if not f.startswith("8="))
    return "\n".join(lines) + "\n"


def _max_abs(param_text: str, weights: bytes, x: np.ndarray, input_name: str, blobs: set[str]):
    """max |value| of each blob in ``blobs`` when ncnn runs the float model on ``x``."""
    import ncnn

    with tempfile.TemporaryDirectory() as tmp:
        param, model_bin = Path(tmp, "f.param"), Path(tmp, "f.bin")
        param.write_text(param_text)
        model_bin.write_bytes(weights)
        net = ncnn.Net()
        net.opt.use_vulkan_compute = False
        net.opt.use_int8_inference = False
        net.opt.lightmode = False  # keep every blob: they are extracted in any order
        if net.load_param(str(param)) != 0 or net.load_model(str(model_bin)) != 0:
            raise ValueError("ncnn cannot load the float calibration model")
        result: dict[str, float] = {}
        ex = net.create_extractor()
        ex.input(input_name, ncnn.Mat(np.ascontiguousarray(x)))
        for blob in sorted(blobs):
            status, mat = ex.extract(blob)
            if status != 0:
                raise ValueError(f"ncnn cannot extract {blob!r} from the float model")
            result[blob] = float(np.abs(np.array(mat)).max())
            del mat
        del ex
        net.clear()
    return result


def _scale(max_abs: float) -> np.float32:
    return np.float32(127.0 / max_abs if max_abs > 0 else 1.0)


def _int8_chunks(layer: LayerLine, max_abs: dict[str, float]) -> list[bytes]:
    """ncnn's read order for one int8 layer: int8 weight, bias, weight scales, bottom, top."""
    weight, *bias = layer.arrays
    term = layer.int8_term
    num_output = layer.int_param("0")
    rows = weight.reshape(num_output, -1)
    if layer.type == "ConvolutionDepthWise":
        group = layer.int_param("7", 1)
        per_group = np.abs(rows).reshape(group, -1).max(axis=1)
        ws = per_group if term in (1, 101) else np.array([per_group.max()])
        ws = np.array([_scale(m) for m in ws], np.float32)
        row_scales = np.repeat(ws, num_output // ws.size)
    else:
        ws = np.array([_scale(m) for m in np.abs(rows).max(axis=1)], np.float32)
        row_scales = ws
    q = np.clip(np.round(rows * row_scales[:, None]), -127, 127).astype(np.int8).tobytes()
    chunks = [TAG_INT8 + q + bytes(-len(q) % 4), *(b.tobytes() for b in bias), ws.tobytes()]
    chunks.append(_scale(max_abs[layer.bottoms[0]]).tobytes())
    if term > 100 and layer.type != "InnerProduct":
        chunks.append(_scale(max_abs[layer.tops[0]]).tobytes())
    return chunks


def int8_model(param: Path) -> tuple[bytes, np.ndarray, dict[str, Any]]:
    """(the int8 .bin, the input, meta) for one int8 .param."""
    text = param.read_text()
    layers = _layers(text)
    rng = np.random.default_rng(0)
    for layer in layers:
        _float_weights(layer, rng)
    input_name, shape, output_name = _graph(param)
    x = np.random.default_rng(1).uniform(-1, 1, shape).astype(np.float32)
    blobs = {b for layer in layers if layer.int8_term for b in (layer.bottoms[0], layer.tops[0])}
    max_abs = _max_abs(_float_param(text), _float_bin(layers), x, input_name, blobs)
    chunks: list[bytes] = []
    for layer in layers:
        if layer.int8_term:
            chunks += _int8_chunks(layer, max_abs)
        else:
            chunks.append(_float_bin([layer]))
    meta = {"input": input_name, "output": output_name, "input_shape": list(shape)}
    return b"".join(chunks), x, meta


def make(param: Path, out: Path) -> dict[str, Any]:
    folder = out / param.stem
    folder.mkdir(parents=True, exist_ok=True)
    weights, x, meta = int8_model(param)
    shutil.copyfile(param, folder / "model.param")
    (folder / "model.bin").write_bytes(weights)
    np.save(folder / "input.npy", x)
    (folder / "meta.json").write_text(json.dumps(meta) + "\n")
    return {"model": param.stem, **meta, "bin_bytes": len(weights)}


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
