"""Attention: MultiHeadAttention and SDPA (ncnn's reference semantics) in numpy, and on the
GPU as projections and per-head products through ``shaders/gemm.comp`` around
``softmax.comp``. Their kv cache (param 7) is in ``_attention_cache``."""

from __future__ import annotations

import math

import numpy as np

from ..gpu._memory import Buffer
from ._attention_cache import (
    MhaRoles,
    check_mha_past,
    check_sdpa_past,
    concat_seq,
    concat_spec,
    mha_roles,
    past_length,
    record_concat,
)
from ._attention_products import attention_specs, record_attention, softmax_rows
from ._base import BlobCount, Layer, ModelBin, Shape
from ._gpu_api import GpuBlob, GpuTarget, PipelineSpec, RecordContext
from ._limits import MAX_BLOB_ELEMENTS, MAX_CHANNELS
from ._registry import register_layer
from ._schema import Param
from ._strided_gemm import Operand, dispatch_gemm, gemm_spec

_F32 = np.float32


@register_layer("MultiHeadAttention")
class MultiHeadAttention(Layer):
    """torch.nn.MultiheadAttention: 0 embed_dim, 1 num_heads, 2 weight_data_size (embed_dim
    times qdim, the query and output width), 3 kdim, 4 vdim, 5 attn_mask (the last input is
    an additive mask, (src, dst) or (num_heads, src, dst)), 6 scale (default
    1/sqrt(embed_dim / num_heads)). Inputs: q; q and kv; or q, k and v (each (seq, width)).

    7 kv_cache: the past key and value, (embed_dim, past) after the projections, come last
    and the new caches are outputs 1 and 2. One input (self-attention) appends the current
    key and value to the past; with k (and v) blobs a non-empty past replaces them (the
    cross-attention keys of an encoder, computed once). The mask's width is past + current,
    or the past's length. 18 quantize_term is refused.
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
        if self.kv_cache not in (0, 1):
            raise ValueError(f"MultiHeadAttention: param 7 kv_cache={self.kv_cache} not 0/1")
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
        extra, outs = self.attn_mask + 2 * self.kv_cache, 1 + 2 * self.kv_cache
        return (1 + extra, 3 + extra), (outs, outs)

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

    def _roles(self, count: int) -> MhaRoles:
        return mha_roles(count, self.attn_mask, self.kv_cache)

    def _lengths(self, input_shapes: list[Shape], roles: MhaRoles) -> tuple[int, int]:
        """(past, dst): the past's length and the keys attended to (ncnn's dst_seqlen)."""
        cur = input_shapes[roles.k][0]
        if roles.past is None:
            return 0, cur
        key, value = (input_shapes[i] for i in roles.past)
        past = check_mha_past(self.embed_dim, key, value)
        return past, (past + cur if roles.self_attention else past or cur)

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        r = self._roles(len(input_shapes))
        q, k, v = input_shapes[r.q], input_shapes[r.k], input_shapes[r.v]
        for name, shape, width in (("q", q, self.qdim), ("k", k, self.kdim), ("v", v, self.vdim)):
            if len(shape) != 2 or shape[1] != width:
                raise ValueError(
                    f"MultiHeadAttention: {name} must be (seq, {width}), got shape {shape}"
                )
        if k[0] != v[0]:
            raise ValueError(f"MultiHeadAttention: k {k} and v {v} differ in length")
        _, dst = self._lengths(input_shapes, r)
        if r.mask is not None:
            mask = tuple(input_shapes[r.mask])
            if mask not in ((q[0], dst), (self.num_heads, q[0], dst)):
                raise ValueError(
                    f"MultiHeadAttention: attn_mask must be ({q[0]}, {dst}) or "
                    f"({self.num_heads}, {q[0]}, {dst}), got {mask}"
                )
        cache: Shape = (self.embed_dim, dst)
        return [(q[0], self.qdim)] + [cache] * (2 * self.kv_cache)

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        xs = [np.asarray(x, _F32) for x in inputs]
        self.output_shapes([x.shape for x in xs])
        r = self._roles(len(xs))
        past, _ = self._lengths([x.shape for x in xs], r)
        heads, d = self.num_heads, self.embed_dim // self.num_heads
        q = (xs[r.q] @ self.wq.T + self.bq) * _F32(self.scale)
        # keys and values as ncnn caches them: (embed_dim, dst)
        pasts = [xs[i] for i in r.past] if r.past and past else []
        if pasts and not r.self_attention:
            kt, vt = pasts  # the cached keys replace k and v
        else:
            kt = (xs[r.k] @ self.wk.T + self.bk).T
            vt = (xs[r.v] @ self.wv.T + self.bv).T
            if pasts:
                kt = concat_seq(pasts[0], kt, self.embed_dim)
                vt = concat_seq(pasts[1], vt, self.embed_dim)
        qh = q.reshape(-1, heads, d).transpose(1, 0, 2)
        scores = qh @ kt.reshape(heads, d, -1)  # (heads, src, dst)
        if r.mask is not None:
            scores = scores + xs[r.mask]
        attended = softmax_rows(scores) @ vt.reshape(heads, d, -1).transpose(0, 2, 1)
        merged = attended.transpose(1, 0, 2).reshape(-1, self.embed_dim)
        out = [np.asarray(merged @ self.wo.T + self.bo, _F32)]
        caches = [np.ascontiguousarray(kt, _F32), np.ascontiguousarray(vt, _F32)]
        return out + caches * self.kv_cache

    # -- GPU -------------------------------------------------------------------------------

    def gpu_weights(self, target: GpuTarget) -> dict[str, np.ndarray]:
        return {
            "wq": self.wq, "bq": self.bq, "wk": self.wk, "bk": self.bk,
            "wv": self.wv, "bv": self.bv, "wo": self.wo, "bo": self.bo,
        }  # fmt: skip

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        specs = attention_specs(target) | {"gemm": gemm_spec(target.info, True)}
        return specs | ({"concat": concat_spec(target)} if self.kv_cache else {})

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        r = self._roles(len(inputs))
        src = inputs[r.q].shape[0]
        e, heads = self.embed_dim, self.num_heads
        d = e // heads
        q = ctx.scratch(4 * src * e)
        self._linear(ctx, inputs[r.q], "wq", "bq", Operand(q, e, 1), src, self.scale)
        if self.kv_cache:  # k and v in the caches, (embed_dim, dst)
            dst = self._record_caches(ctx, r, inputs, outputs)
            k_op = Operand(outputs[1], dst, 1, batch1=d * dst)
            v_op = Operand(outputs[2], 1, dst, batch1=d * dst)
        else:  # k and v as (dst, embed_dim)
            dst = inputs[r.k].shape[0]
            k, v = ctx.scratch(4 * dst * e), ctx.scratch(4 * dst * e)
            self._linear(ctx, inputs[r.k], "wk", "bk", Operand(k, e, 1), dst, 1.0)
            self._linear(ctx, inputs[r.v], "wv", "bv", Operand(v, e, 1), dst, 1.0)
            k_op, v_op = Operand(k, 1, e, batch1=d), Operand(v, e, 1, batch1=d)
        ctx.barrier()
        mask = None
        if r.mask is not None:
            per_head = src * dst if len(inputs[r.mask].shape) == 3 else 0
            mask = Operand(inputs[r.mask], dst, 1, batch1=per_head)
        merged = ctx.scratch(4 * src * e)
        operands = (Operand(q, e, 1, batch1=d), k_op, v_op, Operand(merged, e, 1, batch1=d))
        record_attention(ctx, (src, dst, d, d), (heads, 1), operands, mask, 1.0)
        ctx.barrier()
        self._linear(ctx, merged, "wo", "bo", Operand(outputs[0], self.qdim, 1), src, 1.0)

    def _record_caches(
        self, ctx: RecordContext, r: MhaRoles, inputs: list[GpuBlob], outputs: list[GpuBlob]
    ) -> int:
        """Fill the cache outputs (embed_dim, dst); returns dst."""
        e = self.embed_dim
        assert r.past is not None
        past_k, past_v = (inputs[i] for i in r.past)
        past = past_length(past_k.shape, 1)
        if past and not r.self_attention:  # the cached keys replace k and v
            ctx.copy(past_k, 0, outputs[1], 0, e * past)
            ctx.copy(past_v, 0, outputs[2], 0, e * past)
            return past
        cur = inputs[r.k].shape[0]
        projected = []
        for x, w, b, out in ((r.k, "wk", "bk", outputs[1]), (r.v, "wv", "bv", outputs[2])):
            target = ctx.scratch(4 * e * cur) if past else out.buffer
            # transposed: (embed_dim, cur), as the cache holds it
            self._linear(ctx, inputs[x], w, b, Operand(target, 1, cur), cur, 1.0)
            projected.append(target)
        if past:
            ctx.barrier()
            record_concat(ctx, past_k, projected[0], outputs[1], e, (past, cur))
            record_concat(ctx, past_v, projected[1], outputs[2], e, (past, cur))
        return past + cur

    def _linear(
        self,
        ctx: RecordContext,
        x: Buffer | GpuBlob,
        weight: str,
        bias: str,
        out: Operand,
        rows: int,
        alpha: float,
    ) -> None:
        """``out = alpha * (bias + x @ weight.T)`` for ``rows`` rows (ncnn's projections)."""
        n, k = getattr(self, weight).shape
        dispatch_gemm(
            ctx, "gemm", (rows, n, k),
            Operand(x, k, 1), Operand(ctx.weight(weight), 1, k), out,
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
    output is (heads, src, out_dim). 7 kv_cache: the past key and value come last, the keys
    attended to are past then current (the mask's width is their sum) and outputs 1 and 2
    are those caches, (groups, past + cur, dim). 18 int8_scale_term is refused."""

    attn_mask = Param(5, int, 0)
    scale_param = Param(6, float, 0.0)
    kv_cache = Param(7, int, 0)
    int8_scale_term = Param(18, int, 0)

    one_blob_only = False
    gpu = True

    def validate(self) -> None:
        if self.kv_cache not in (0, 1):
            raise ValueError(f"SDPA: param 7 kv_cache={self.kv_cache} must be 0 or 1")
        if self.int8_scale_term != 0:
            raise ValueError(
                f"SDPA: param 18 int8_scale_term={self.int8_scale_term}: int8 is not supported"
            )
        if self.attn_mask not in (0, 1):
            raise ValueError(f"SDPA: param 5 attn_mask={self.attn_mask} must be 0 or 1")

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        n, outs = 3 + self.attn_mask + 2 * self.kv_cache, 1 + 2 * self.kv_cache
        return (n, n), (outs, outs)

    def scale(self, dim: int) -> float:
        if self.scale_param == 0.0:
            return float(_F32(1.0 / math.sqrt(dim)))
        return self.scale_param

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        (heads, src, dim), (groups, cur, kdim), (vgroups, vlen, out_dim) = (
            _heads(tuple(s)) for s in input_shapes[:3]
        )
        if kdim != dim or vlen != cur or vgroups != groups:
            raise ValueError(
                f"SDPA: k {input_shapes[1]} and v {input_shapes[2]} do not fit q {input_shapes[0]}"
            )
        if heads % groups:
            raise ValueError(f"SDPA: {heads} query heads do not split into {groups} groups")
        past = 0
        if self.kv_cache:
            key, value = input_shapes[3 + self.attn_mask :]
            past = check_sdpa_past(tuple(key), tuple(value), groups, dim, out_dim)
        dst = past + cur
        if self.attn_mask:
            mask = tuple(input_shapes[3])
            if mask not in ((src, dst), (1, src, dst), (heads, src, dst)):
                raise ValueError(
                    f"SDPA: attn_mask must be ({src}, {dst}) or (1 or {heads}, {src}, {dst}), "
                    f"got {mask}"
                )
        caches = [(groups, dst, dim), (groups, dst, out_dim)] if past else input_shapes[1:3]
        return [(heads, src, out_dim)] + [tuple(c) for c in caches] * self.kv_cache

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        xs = [np.asarray(x, _F32) for x in inputs]
        shapes = self.output_shapes([x.shape for x in xs])
        q, k, v = (x.reshape(_heads(x.shape)) for x in xs[:3])
        groups = k.shape[0]
        if self.kv_cache and xs[-2].size:  # past then current, per group
            k = concat_seq(xs[-2], k, groups).reshape(groups, -1, k.shape[2])
            v = concat_seq(xs[-1], v, groups).reshape(groups, -1, v.shape[2])
        per_group, scale = q.shape[0] // groups, _F32(self.scale(q.shape[2]))
        scores = (q @ np.repeat(k, per_group, axis=0).transpose(0, 2, 1)) * scale
        if self.attn_mask:
            scores = scores + xs[3]
        out = np.asarray(softmax_rows(scores) @ np.repeat(v, per_group, axis=0), _F32)
        caches = [np.ascontiguousarray(k), np.ascontiguousarray(v)] * self.kv_cache
        return [x.reshape(shape) for x, shape in zip([out, *caches], shapes, strict=True)]

    # -- GPU -------------------------------------------------------------------------------

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        cache = {"concat": concat_spec(target)} if self.kv_cache else {}
        return attention_specs(target) | cache

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        (heads, src, dim), (groups, dst, _), (_, _, out_dim) = (_heads(x.shape) for x in inputs[:3])
        key, value = inputs[1], inputs[2]
        if self.kv_cache:  # the caches, past then current in each group, are the keys
            past_k, past_v = inputs[-2:]
            past = past_length(past_k.shape, -2)
            record_concat(ctx, past_k, key, outputs[1], groups, (past * dim, dst * dim))
            record_concat(ctx, past_v, value, outputs[2], groups, (past * out_dim, dst * out_dim))
            key, value, dst = outputs[1], outputs[2], past + dst
            ctx.barrier()
        per = heads // groups  # batch level 1: the group, level 2: the head within it
        mask = None
        if self.attn_mask:
            each = src * dst if len(inputs[3].shape) == 3 and inputs[3].shape[0] > 1 else 0
            mask = Operand(inputs[3], dst, 1, per * each, each)
        operands = (
            Operand(inputs[0], dim, 1, per * src * dim, src * dim),
            Operand(key, 1, dim, dst * dim, 0),
            Operand(value, out_dim, 1, dst * out_dim, 0),
            Operand(outputs[0], out_dim, 1, per * src * out_dim, src * out_dim),
        )
        sizes = (src, dst, dim, out_dim)
        record_attention(ctx, sizes, (groups, per), operands, mask, self.scale(dim))
