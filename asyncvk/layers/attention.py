"""Attention: MultiHeadAttention (ncnn's reference semantics) in numpy, and on the GPU as
projections and per-head products through ``shaders/gemm.comp`` around ``softmax.comp``."""

from __future__ import annotations

import math

import numpy as np

from ..gpu._memory import Buffer
from ._base import BlobCount, Layer, ModelBin, Shape
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    groups_1d,
    local_size_1d,
    pack_push,
)
from ._limits import MAX_BLOB_ELEMENTS, MAX_CHANNELS
from ._registry import register_layer
from ._schema import Param
from ._strided_gemm import Operand, dispatch_gemm, gemm_spec

_F32 = np.float32


def softmax_rows(x: np.ndarray) -> np.ndarray:
    """ncnn's softmax along the last axis: max folded from -FLT_MAX, exp, sum, divide."""
    m = np.fmax(np.fmax.reduce(x, axis=-1, keepdims=True), _F32(-np.finfo(_F32).max))
    with np.errstate(all="ignore"):
        e = np.exp(x - m)
        return np.asarray(e / np.sum(e, axis=-1, keepdims=True, dtype=_F32), _F32)


@register_layer("MultiHeadAttention")
class MultiHeadAttention(Layer):
    """torch.nn.MultiheadAttention: 0 embed_dim, 1 num_heads, 2 weight_data_size (embed_dim
    times qdim, the query and output width), 3 kdim, 4 vdim, 5 attn_mask (the last input is
    an additive mask, (src, dst) or (num_heads, src, dst)), 6 scale (default
    1/sqrt(embed_dim / num_heads)). Inputs: q; q and kv; or q, k and v (each (seq, width)).

    7 kv_cache and 18 quantize_term are refused.
    """

    embed_dim = Param(0, int, 0, limit=MAX_CHANNELS)
    num_heads = Param(1, int, 1, limit=MAX_CHANNELS)
    weight_data_size = Param(2, int, 0, limit=MAX_BLOB_ELEMENTS)
    kdim = Param(3, int, embed_dim, limit=MAX_CHANNELS)
    vdim = Param(4, int, embed_dim, limit=MAX_CHANNELS)
    attn_mask = Param(5, int, 0)
    scale_param = Param(6, float, math.nan)  # nan: ncnn's default, from embed_dim / num_heads
    kv_cache = Param(7, int, 0)
    quantize_term = Param(18, int, 0)

    one_blob_only = False
    gpu = True
    wq = wk = wv = wo = np.zeros((0, 0), _F32)
    bq = bk = bv = bo = np.zeros(0, _F32)

    def validate(self) -> None:
        if self.kv_cache != 0:
            raise ValueError("MultiHeadAttention: param 7 kv_cache is not supported")
        if self.quantize_term != 0:
            raise ValueError(
                f"MultiHeadAttention: param 18 quantize_term={self.quantize_term}: quantized "
                "attention is not supported"
            )
        e, h = self.embed_dim, self.num_heads
        if e <= 0 or h <= 0 or e % h:
            raise ValueError(
                f"MultiHeadAttention: param 0 embed_dim={e} must be a positive multiple of "
                f"param 1 num_heads={h}"
            )
        if self.weight_data_size <= 0 or self.weight_data_size % e:
            raise ValueError(
                f"MultiHeadAttention: param 2 weight_data_size={self.weight_data_size} must be "
                f"a positive multiple of embed_dim={e}"
            )
        if self.kdim <= 0 or self.vdim <= 0:
            raise ValueError(
                f"MultiHeadAttention: params 3 kdim={self.kdim} and 4 vdim={self.vdim} must be > 0"
            )
        if self.attn_mask not in (0, 1):
            raise ValueError(f"MultiHeadAttention: param 5 attn_mask={self.attn_mask} not 0/1")

    @property
    def qdim(self) -> int:
        return self.weight_data_size // self.embed_dim

    @property
    def scale(self) -> float:
        if math.isnan(self.scale_param):
            return float(_F32(1.0) / np.sqrt(_F32(self.embed_dim // self.num_heads)))
        return self.scale_param

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (1 + self.attn_mask, 3 + self.attn_mask), (1, 1)

    def load_model(self, mb: ModelBin) -> None:
        e = self.embed_dim

        def weight(rows: int, cols: int) -> np.ndarray:
            return np.asarray(mb.load(rows * cols, 0), _F32).reshape(rows, cols)

        def bias(n: int) -> np.ndarray:
            return np.asarray(mb.load(n, 1), _F32)

        self.wq, self.bq = weight(e, self.qdim), bias(e)
        self.wk, self.bk = weight(e, self.kdim), bias(e)
        self.wv, self.bv = weight(e, self.vdim), bias(e)
        self.wo, self.bo = weight(self.qdim, e), bias(self.qdim)

    # -- shapes ----------------------------------------------------------------------------

    def _roles(self, count: int) -> tuple[int, int, int, int | None]:
        """Input indexes of q, k, v and the mask (None: no mask), as ncnn resolves them."""
        kv = count - self.attn_mask
        k = 0 if kv == 1 else 1
        v = 2 if kv == 3 else k
        return 0, k, v, (kv if self.attn_mask else None)

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        qi, ki, vi, mi = self._roles(len(input_shapes))
        q, k, v = input_shapes[qi], input_shapes[ki], input_shapes[vi]
        for name, shape, width in (("q", q, self.qdim), ("k", k, self.kdim), ("v", v, self.vdim)):
            if len(shape) != 2 or shape[1] != width:
                raise ValueError(
                    f"MultiHeadAttention: {name} must be (seq, {width}), got shape {shape}"
                )
        if k[0] != v[0]:
            raise ValueError(f"MultiHeadAttention: k {k} and v {v} differ in length")
        if mi is not None:
            mask = tuple(input_shapes[mi])
            if mask not in ((q[0], k[0]), (self.num_heads, q[0], k[0])):
                raise ValueError(
                    f"MultiHeadAttention: attn_mask must be ({q[0]}, {k[0]}) or "
                    f"({self.num_heads}, {q[0]}, {k[0]}), got {mask}"
                )
        return [(q[0], self.qdim)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        xs = [np.asarray(x, _F32) for x in inputs]
        self.output_shapes([x.shape for x in xs])
        qi, ki, vi, mi = self._roles(len(xs))
        heads, d = self.num_heads, self.embed_dim // self.num_heads
        q = (xs[qi] @ self.wq.T + self.bq) * _F32(self.scale)
        k = xs[ki] @ self.wk.T + self.bk
        v = xs[vi] @ self.wv.T + self.bv
        qh = q.reshape(-1, heads, d).transpose(1, 0, 2)
        kh = k.reshape(-1, heads, d).transpose(1, 0, 2)
        vh = v.reshape(-1, heads, d).transpose(1, 0, 2)
        scores = qh @ kh.transpose(0, 2, 1)  # (heads, src, dst)
        if mi is not None:
            scores = scores + xs[mi]
        attended = softmax_rows(scores) @ vh  # (heads, src, d)
        merged = attended.transpose(1, 0, 2).reshape(-1, self.embed_dim)
        return [np.asarray(merged @ self.wo.T + self.bo, _F32)]

    # -- GPU -------------------------------------------------------------------------------

    def gpu_weights(self, target: GpuTarget) -> dict[str, np.ndarray]:
        return {
            "wq": self.wq, "bq": self.bq, "wk": self.wk, "bk": self.bk,
            "wv": self.wv, "bv": self.bv, "wo": self.wo, "bo": self.bo,
        }  # fmt: skip

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        return {
            "gemm": gemm_spec(target.info, True),
            "gemm_noc": gemm_spec(target.info, False),
            "gemm_mask": gemm_spec(target.info, True, c_last=True),
            "softmax": PipelineSpec("softmax", (), local_size_1d(target.info)),
        }

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        qi, ki, vi, mi = self._roles(len(inputs))
        src, dst = inputs[qi].shape[0], inputs[ki].shape[0]
        e, heads = self.embed_dim, self.num_heads
        d = e // heads
        q = ctx.scratch(4 * src * e)
        k = ctx.scratch(4 * dst * e)
        v = ctx.scratch(4 * dst * e)
        for x, w, b, out, rows, alpha in (
            (inputs[qi], "wq", "bq", q, src, self.scale),
            (inputs[ki], "wk", "bk", k, dst, 1.0),
            (inputs[vi], "wv", "bv", v, dst, 1.0),
        ):
            self._linear(ctx, x, w, b, out, rows, alpha)
        ctx.barrier()
        scores = ctx.scratch(4 * heads * src * dst)
        mask = None
        if mi is not None:
            per_head = src * dst if len(inputs[mi].shape) == 3 else 0
            mask = Operand(inputs[mi], dst, 1, batch1=per_head)
        dispatch_gemm(
            ctx, "gemm_mask" if mask else "gemm_noc", (src, dst, d),
            Operand(q, e, 1, batch1=d), Operand(k, 1, e, batch1=d),
            Operand(scores, dst, 1, batch1=src * dst), mask, batch=(heads, 1), c_last=True,
        )  # fmt: skip
        ctx.barrier()
        probs = ctx.scratch(4 * heads * src * dst)
        local = local_size_1d(ctx.info)
        ctx.dispatch(
            "softmax", [scores, probs], pack_push("3i", heads * src, dst, 1),
            groups_1d(heads * src, local, ctx.info),
        )  # fmt: skip
        ctx.barrier()
        merged = ctx.scratch(4 * src * e)
        dispatch_gemm(
            ctx, "gemm_noc", (src, d, dst),
            Operand(probs, dst, 1, batch1=src * dst), Operand(v, e, 1, batch1=d),
            Operand(merged, e, 1, batch1=d), batch=(heads, 1),
        )  # fmt: skip
        ctx.barrier()
        self._linear(ctx, merged, "wo", "bo", outputs[0], src, 1.0)

    def _linear(
        self,
        ctx: RecordContext,
        x: Buffer | GpuBlob,
        weight: str,
        bias: str,
        out: Buffer | GpuBlob,
        rows: int,
        alpha: float,
    ) -> None:
        """``out = alpha * (bias + x @ weight.T)`` for ``rows`` rows (ncnn's projections)."""
        n, k = getattr(self, weight).shape
        dispatch_gemm(
            ctx, "gemm", (rows, n, k),
            Operand(x, k, 1), Operand(ctx.weight(weight), 1, k), Operand(out, n, 1),
            Operand(ctx.weight(bias), 0, 1), alpha=alpha,
        )  # fmt: skip


def _heads(shape: Shape) -> tuple[int, int, int]:
    """(heads, rows, width) of an SDPA operand: a 2-D blob is one head."""
    if len(shape) == 2:
        return 1, shape[0], shape[1]
    if len(shape) != 3:
        raise ValueError(f"SDPA: operands must be 2-D or 3-D (heads, seq, dim), got {shape}")
    return shape[0], shape[1], shape[2]


@register_layer("SDPA")
class SDPA(Layer):
    """torch's scaled_dot_product_attention: inputs q (heads, src, dim), k (groups, dst,
    dim), v (groups, dst, out_dim) and, with 5 attn_mask, an additive mask (src, dst) or
    (1 or heads, src, dst); heads share k and v in groups (grouped-query attention).
    ``softmax(q @ k.T * scale + mask) @ v`` with 6 scale (0: 1/sqrt(dim)), per head; the
    output is (heads, src, out_dim). 7 kv_cache and 18 int8_scale_term are refused."""

    attn_mask = Param(5, int, 0)
    scale_param = Param(6, float, 0.0)
    kv_cache = Param(7, int, 0)
    int8_scale_term = Param(18, int, 0)

    one_blob_only = False
    gpu = True

    def validate(self) -> None:
        if self.kv_cache != 0:
            raise ValueError("SDPA: param 7 kv_cache is not supported")
        if self.int8_scale_term != 0:
            raise ValueError(
                f"SDPA: param 18 int8_scale_term={self.int8_scale_term}: int8 is not supported"
            )
        if self.attn_mask not in (0, 1):
            raise ValueError(f"SDPA: param 5 attn_mask={self.attn_mask} must be 0 or 1")

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        n = 3 + self.attn_mask
        return (n, n), (1, 1)

    def scale(self, dim: int) -> float:
        if self.scale_param == 0.0:
            return float(_F32(1.0 / math.sqrt(dim)))
        return self.scale_param

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        (heads, src, dim), (groups, dst, kdim), (vgroups, vlen, out_dim) = (
            _heads(tuple(s)) for s in input_shapes[:3]
        )
        if kdim != dim or vlen != dst or vgroups != groups:
            raise ValueError(
                f"SDPA: k {input_shapes[1]} and v {input_shapes[2]} do not fit q {input_shapes[0]}"
            )
        if heads % groups:
            raise ValueError(f"SDPA: {heads} query heads do not split into {groups} groups")
        if self.attn_mask:
            mask = tuple(input_shapes[3])
            if mask not in ((src, dst), (1, src, dst), (heads, src, dst)):
                raise ValueError(
                    f"SDPA: attn_mask must be ({src}, {dst}) or (1 or {heads}, {src}, {dst}), "
                    f"got {mask}"
                )
        return [(heads, src, out_dim)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        xs = [np.asarray(x, _F32) for x in inputs]
        (shape,) = self.output_shapes([x.shape for x in xs])
        q, k, v = (x.reshape(_heads(x.shape)) for x in xs[:3])
        per_group = q.shape[0] // k.shape[0]
        k = np.repeat(k, per_group, axis=0)
        v = np.repeat(v, per_group, axis=0)
        scores = (q @ k.transpose(0, 2, 1)) * _F32(self.scale(q.shape[2]))
        if self.attn_mask:
            scores = scores + xs[3]
        return [np.asarray(softmax_rows(scores) @ v, _F32).reshape(shape)]

    # -- GPU -------------------------------------------------------------------------------

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        return {
            "gemm_noc": gemm_spec(target.info, False),
            "gemm_mask": gemm_spec(target.info, True, c_last=True),
            "softmax": PipelineSpec("softmax", (), local_size_1d(target.info)),
        }

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        (heads, src, dim), (groups, dst, _), (_, _, out_dim) = (_heads(x.shape) for x in inputs[:3])
        per = heads // groups  # batch level 1: the group, level 2: the head within it
        scores = ctx.scratch(4 * heads * src * dst)
        mask = None
        if self.attn_mask:
            each = src * dst if len(inputs[3].shape) == 3 and inputs[3].shape[0] > 1 else 0
            mask = Operand(inputs[3], dst, 1, per * each, each)
        dispatch_gemm(
            ctx, "gemm_mask" if mask else "gemm_noc", (src, dst, dim),
            Operand(inputs[0], dim, 1, per * src * dim, src * dim),
            Operand(inputs[1], 1, dim, dst * dim, 0),
            Operand(scores, dst, 1, per * src * dst, src * dst),
            mask, alpha=self.scale(dim), batch=(groups, per), c_last=True,
        )  # fmt: skip
        ctx.barrier()
        probs = ctx.scratch(4 * heads * src * dst)
        ctx.dispatch(
            "softmax", [scores, probs], pack_push("3i", heads * src, dst, 1),
            groups_1d(heads * src, local_size_1d(ctx.info), ctx.info),
        )  # fmt: skip
        ctx.barrier()
        dispatch_gemm(
            ctx, "gemm_noc", (src, out_dim, dst),
            Operand(probs, dst, 1, per * src * dst, src * dst),
            Operand(inputs[2], out_dim, 1, dst * out_dim, 0),
            Operand(outputs[0], out_dim, 1, per * src * out_dim, src * out_dim),
            batch=(groups, per),
        )  # fmt: skip
