"""Pooling3D (max / average, padded, global, adaptive), as ncnn's pooling3d.cpp on dims-4 blobs
(c, d, h, w): numpy over strided window views, and the GPU path on ``pooling3d.comp`` (one
output per invocation; the host works out ncnn's pads and which taps an average counts).

Max pooling keeps ncnn's NaN rule (see ``pooling.ncnn_max``): a NaN comes out only when it is
the window's first value, a padded first tap being -FLT_MAX.
"""

from __future__ import annotations

import math

import numpy as np

from ._base import Layer, Shape
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    groups_1d,
    local_size_1d,
    pack_push,
)
from ._limits import MAX_EXTENT, MAX_KERNEL, MAX_PAD, MAX_STRIDE
from ._registry import register_layer
from ._schema import Param
from ._volume import (
    Dims3,
    Pads3,
    bins,
    border_3d,
    check_same_pads,
    dims4,
    out_size,
    same_pads,
    same_totals,
    taps_inside,
    windows_3d,
)
from .pooling import FLT_MAX, POOL_AVE, POOL_MAX, ncnn_max

#: The taps an average counts, per axis (d, h, w): [lo, hi) in padded coordinates.
Bounds = tuple[tuple[int, int], tuple[int, int], tuple[int, int]]


@register_layer("Pooling3D")
class Pooling3D(Layer):
    """0 type, 1/11/21 kernel (w/h/d), 2/12/22 stride, 3/14/13/15/23/16 pads (left, right,
    top, bottom, front, behind), 4 global, 5 pad_mode, 6 avgpool_count_include_pad,
    7 adaptive, 8/18/28 out_w/h/d (-233: the input's). Output (c, d, h, w), or (c,) when
    global."""

    pooling_type = Param(0, int, POOL_MAX)
    kernel_w = Param(1, int, 0, limit=MAX_KERNEL)
    kernel_h = Param(11, int, kernel_w, limit=MAX_KERNEL)
    kernel_d = Param(21, int, kernel_w, limit=MAX_KERNEL)
    stride_w = Param(2, int, 1, limit=MAX_STRIDE)
    stride_h = Param(12, int, stride_w, limit=MAX_STRIDE)
    stride_d = Param(22, int, stride_w, limit=MAX_STRIDE)
    pad_left = Param(3, int, 0, limit=MAX_PAD)
    pad_right = Param(14, int, pad_left, limit=MAX_PAD)
    pad_top = Param(13, int, pad_left, limit=MAX_PAD)
    pad_bottom = Param(15, int, pad_top, limit=MAX_PAD)
    pad_front = Param(23, int, pad_left, limit=MAX_PAD)
    pad_behind = Param(16, int, pad_front, limit=MAX_PAD)
    global_pooling = Param(4, int, 0)
    pad_mode = Param(5, int, 0)
    avgpool_count_include_pad = Param(6, int, 0)
    adaptive_pooling = Param(7, int, 0)
    out_w = Param(8, int, 0, limit=MAX_EXTENT)
    out_h = Param(18, int, out_w, limit=MAX_EXTENT)
    out_d = Param(28, int, out_w, limit=MAX_EXTENT)

    gpu = True

    def validate(self) -> None:
        if self.pooling_type not in (POOL_MAX, POOL_AVE):
            raise ValueError(f"param 0 pooling_type={self.pooling_type} must be 0 (max) or 1 (avg)")
        if self.global_pooling:
            return
        if self.adaptive_pooling:
            for pid, value in ((8, self.out_w), (18, self.out_h), (28, self.out_d)):
                if value <= 0 and value != -233:
                    raise ValueError(
                        f"param {pid} adaptive output size {value} must be > 0 or -233"
                    )
            return
        if self.pad_mode not in (0, 1, 2, 3):
            raise ValueError(f"param 5 pad_mode={self.pad_mode} must be 0..3")
        if min(self.kernel) <= 0:
            raise ValueError(f"params 1/11/21 kernel (w, h, d) {self.kernel[::-1]} must be > 0")
        if min(self.stride) <= 0:
            raise ValueError("params 2/12/22 stride must be > 0")
        pads = (self.pad_left, self.pad_right, self.pad_top, self.pad_bottom)
        if min(*pads, self.pad_front, self.pad_behind) < 0:
            raise ValueError("params 3/14/13/15/23/16 pads must be >= 0")

    @property
    def kernel(self) -> Dims3:
        return self.kernel_d, self.kernel_h, self.kernel_w

    @property
    def stride(self) -> Dims3:
        return self.stride_d, self.stride_h, self.stride_w

    @property
    def _param_pads(self) -> Pads3:
        return (
            (self.pad_front, self.pad_behind),
            (self.pad_top, self.pad_bottom),
            (self.pad_left, self.pad_right),
        )

    # -- shapes ------------------------------------------------------------------------------

    def padding(self, size: Dims3) -> tuple[Pads3, Dims3]:
        """(pads, tail pads) per axis as ncnn's Pooling3D::make_padding; the pads include the
        tail that full mode (0) adds so the last window fits."""
        if self.pad_mode == 0:
            pads, tails = [], []
            for n, k, s, (a, b) in zip(
                size, self.kernel, self.stride, self._param_pads, strict=True
            ):
                tail = int(math.fmod(n + a + b - k, s))  # C's %: the dividend's sign
                tails.append(s - tail if tail != 0 else 0)
                pads.append((a, b + tails[-1]))
            return (pads[0], pads[1], pads[2]), (tails[0], tails[1], tails[2])
        if self.pad_mode == 1:
            return self._param_pads, (0, 0, 0)
        pads3 = same_pads(same_totals(size, self.kernel, self.stride), self.pad_mode == 2)
        check_same_pads(self.type_name, pads3)
        return pads3, (0, 0, 0)

    def _adaptive_out(self, size: Dims3) -> Dims3:
        d, h, w = (
            n if o == -233 else o
            for n, o in zip(size, (self.out_d, self.out_h, self.out_w), strict=True)
        )
        return d, h, w

    def _windowed(self, size: Dims3) -> tuple[Dims3, Pads3, Bounds]:
        """The output size, the pads, and the taps an average counts."""
        pads, tails = self.padding(size)
        padded = [n + a + b for n, (a, b) in zip(size, pads, strict=True)]
        if any(p < k for p, k in zip(padded, self.kernel, strict=True)):
            raise ValueError(
                f"input (d, h, w) {size} (padded {tuple(padded)}) is smaller than the kernel"
            )
        d, h, w = (
            out_size(p, k, s) for p, k, s in zip(padded, self.kernel, self.stride, strict=True)
        )
        if self.pooling_type == POOL_AVE and self.avgpool_count_include_pad:
            counted = [(0, p) for p in padded]
        else:
            # ncnn counts the taps inside [param pad, padded - param pad - tail): the *param*
            # pads, even in the SAME modes, whose computed pads it then counts
            counted = [
                (a, p - b - t) for p, (a, b), t in zip(padded, self._param_pads, tails, strict=True)
            ]
        return (d, h, w), pads, (counted[0], counted[1], counted[2])

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        c, d, h, w = dims4(self.type_name, input_shapes[0])
        if self.global_pooling:
            return [(c,)]
        if self.adaptive_pooling:
            return [(c, *self._adaptive_out((d, h, w)))]
        return [(c, *self._windowed((d, h, w))[0])]

    # -- compute -----------------------------------------------------------------------------

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], np.float32)
        c, d, h, w = dims4(self.type_name, x.shape)
        if self.global_pooling:
            flat = x.reshape(c, -1)
            if self.pooling_type == POOL_MAX:
                return [ncnn_max(flat, flat[:, 0], axis=1)]
            return [(flat.sum(axis=1, dtype=np.float32) / np.float32(flat.shape[1]))]
        if self.adaptive_pooling:
            return [self._adaptive(x, self._adaptive_out((d, h, w)))]
        return [self._pool(x)]

    def _adaptive(self, x: np.ndarray, out: Dims3) -> np.ndarray:
        """Reduce each axis's bins in turn (d, h, w); average as ncnn: sum / hk / wk / dk."""
        reduce = np.fmax.reduce if self.pooling_type == POOL_MAX else np.sum
        result, counts, starts = x, [], []
        for axis, (n, n_out) in enumerate(zip(x.shape[1:], out, strict=True), 1):
            lo, hi = bins(n, n_out)
            parts = [
                reduce(result.take(range(a, b), axis=axis), axis=axis)
                for a, b in zip(lo, hi, strict=True)
            ]
            result = np.stack(parts, axis=axis).astype(np.float32)
            counts.append((hi - lo).astype(np.float32))
            starts.append(lo)
        if self.pooling_type == POOL_MAX:
            first = x[:, starts[0]][:, :, starts[1]][:, :, :, starts[2]]
            return np.where(np.isnan(first), first, result).astype(np.float32)
        dk, hk, wk = counts
        result = result / hk[:, None] / wk[None, :] / dk[:, None, None]
        return result.astype(np.float32)

    def _pool(self, x: np.ndarray) -> np.ndarray:
        (od, oh, ow), pads, counted = self._windowed(x.shape[1:])
        geometry = (self.kernel, (1, 1, 1), self.stride, (od, oh, ow))
        axes = (4, 5, 6)
        if self.pooling_type == POOL_MAX:
            windows = windows_3d(border_3d(x, pads, -FLT_MAX), *geometry)
            return ncnn_max(windows, windows[..., 0, 0, 0], axis=axes)
        padded = border_3d(x, pads, 0.0)
        (d0, d1), (h0, h1), (w0, w1) = counted
        masked = np.zeros_like(padded)
        masked[:, d0:d1, h0:h1, w0:w1] = padded[:, d0:d1, h0:h1, w0:w1]
        total = windows_3d(masked, *geometry).sum(axis=axes, dtype=np.float32)
        area = np.einsum(
            "i,j,k->ijk",
            *(
                taps_inside(n, s, k, lo, hi)
                for n, s, k, (lo, hi) in zip(
                    (od, oh, ow), self.stride, self.kernel, counted, strict=True
                )
            ),
        ).astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            return (total / area).astype(np.float32)

    # -- GPU -----------------------------------------------------------------------------------

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        adaptive = int(bool(self.adaptive_pooling) and not self.global_pooling)
        spec = (self.pooling_type, adaptive)
        return {"pool": PipelineSpec("pooling3d", spec, local_size_1d(target.info))}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        c, d, h, w = inputs[0].shape
        if self.global_pooling:  # one window, the whole input
            kernel, stride, out = (d, h, w), (1, 1, 1), (1, 1, 1)
            leads, counted = (0, 0, 0), ((0, d), (0, h), (0, w))
        elif self.adaptive_pooling:
            kernel, stride, out = (1, 1, 1), (1, 1, 1), self._adaptive_out((d, h, w))
            leads, counted = (0, 0, 0), ((0, 0), (0, 0), (0, 0))
        else:
            kernel, stride = self.kernel, self.stride
            out, pads, counted = self._windowed((d, h, w))
            leads = (pads[0][0], pads[1][0], pads[2][0])
        bounds = [v for lo_hi in counted[::-1] for v in lo_hi]
        push = pack_push(
            "22i", w, h, d, c, *out[::-1], *kernel[::-1], *stride[::-1], *leads[::-1], *bounds
        )
        groups = groups_1d(outputs[0].size, local_size_1d(ctx.info), ctx.info)
        ctx.dispatch("pool", [inputs[0], outputs[0]], push, groups)
