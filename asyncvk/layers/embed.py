"""Embed: ncnn's lookup table of token embeddings (src/layer/embed.cpp), which pnnx emits for
``nn.Embedding``: row ``id`` of a (input_dim, num_output) weight per input id, plus a bias.

Token ids as values: ncnn reads the input Mat's int32 bits as the ids, while every asyncvk
input becomes float32 by value (id 5 is 5.0). So here each element's value is the id,
truncated toward zero and clamped to [0, input_dim - 1] as ncnn clamps its ints (NaN is 0).
Feed asyncvk the ids themselves (an int or float array), not int bits viewed as floats. Ids are
exact as float32 up to 2**24 -- and, with ``use_fp16_storage``, only up to 2048 on the GPU.

int8 (param 18, as ncnn2int8 writes it): the weights are stored int8 with one scale after the
bias; a row is ``q / scale`` (+ bias), here made float at load. fp32 weights with param 18
set are quantized with that scale first (ncnn2int8's ``float2int8(w * scale)``); ncnn itself
would read their bytes as int8.
"""

from __future__ import annotations

import math

import numpy as np

from ..gpu._memory import Buffer
from ._base import Layer, ModelBin, Shape
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    groups_1d,
    local_size_1d,
    pack_push,
)
from ._int8 import float2int8
from ._limits import MAX_BLOB_ELEMENTS, MAX_EXTENT
from ._registry import register_layer
from ._schema import Param

_F32 = np.float32


def token_rows(values: np.ndarray, input_dim: int) -> np.ndarray:
    """The table row of each id value: truncated toward zero, clamped to [0, input_dim - 1]
    (the clamp tested in float32 first, as ``embed.comp`` does; NaN gives 0)."""
    v = np.asarray(values, _F32)
    last = input_dim - 1
    rows = np.zeros(v.shape, np.int64)
    inside = (v > 0) & (v < _F32(last))
    rows[inside] = np.trunc(v[inside]).astype(np.int64)
    rows[v >= _F32(last)] = last
    return rows


@register_layer("Embed")
class Embed(Layer):
    """0 num_output, 1 input_dim, 2 bias_term, 3 weight_data_size, 18 int8_scale_term;
    weights: the (input_dim, num_output) table (tagged; int8 with param 18), bias
    (num_output, raw) with bias_term, then the int8 scale (one raw float) with param 18.

    Takes one row of w ids -- shape (w,), or (1, w) and so on -- and gives (w, num_output).
    A blob of more rows is refused: ncnn would read its first row and drop the rest.
    """

    num_output = Param(0, int, 0, limit=MAX_EXTENT)
    input_dim = Param(1, int, 0, limit=MAX_BLOB_ELEMENTS)
    bias_term = Param(2, int, 0)
    weight_data_size = Param(3, int, 0, limit=MAX_BLOB_ELEMENTS)
    int8_scale_term = Param(18, int, 0)

    gpu = True
    table = np.zeros((0, 0), _F32)
    bias: np.ndarray | None = None

    def validate(self) -> None:
        for param in (Embed.num_output, Embed.input_dim):
            value = getattr(self, param.name)
            if value < 1:
                raise ValueError(f"Embed param {param.id} ({param.name}) = {value} must be >= 1")
        need = self.num_output * self.input_dim
        if self.weight_data_size < need:
            raise ValueError(
                f"Embed param 3 (weight_data_size) = {self.weight_data_size} is less than "
                f"param 0 (num_output) * param 1 (input_dim) = {need}: ncnn would read past "
                "the table"
            )

    def load_model(self, mb: ModelBin) -> None:
        size = self.weight_data_size
        weight = mb.load_int8_or_float(size) if self.int8_scale_term else mb.load(size, 0)
        self.bias = np.asarray(mb.load(self.num_output, 1), _F32) if self.bias_term else None
        if self.int8_scale_term:
            scale = _F32(np.asarray(mb.load(1, 1), _F32)[0])
            with np.errstate(all="ignore"):
                if weight.dtype != np.int8:
                    weight = float2int8(np.asarray(weight, _F32) * scale)
                weight = weight.astype(_F32) * (_F32(1) / scale)
        table = np.asarray(weight, _F32)[: self.num_output * self.input_dim]
        self.table = table.reshape(self.input_dim, self.num_output)

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        if math.prod(shape[:-1]) != 1:
            raise ValueError(
                f"Embed takes one row of token ids, shape (w,) or (1, w), got shape {shape}: "
                "ncnn would read its first row only"
            )
        return [(shape[-1], self.num_output)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], _F32)
        self.output_shapes([x.shape])
        out = self.table[token_rows(x.reshape(-1), self.input_dim)]
        if self.bias is not None:
            out = out + self.bias
        return [out.astype(_F32)]

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        spec = (int(bool(self.bias_term)),)
        return {"embed": PipelineSpec("embed", spec, local_size_1d(target.info))}

    def gpu_weights(self, target: GpuTarget) -> dict[str, np.ndarray]:
        bias = self.bias if self.bias is not None else np.zeros(1, _F32)
        return {"weight": self.table.reshape(-1), "bias": bias}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        n = outputs[0].size
        push = pack_push("3i", n, self.num_output, self.input_dim)
        bufs: list[Buffer | GpuBlob] = [inputs[0], outputs[0], *map(ctx.weight, ("weight", "bias"))]
        ctx.dispatch("embed", bufs, push, groups_1d(n, local_size_1d(ctx.info), ctx.info))
