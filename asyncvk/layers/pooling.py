"""Pooling (max / average, padded, global, adaptive): numpy as ncnn's pooling.cpp, and the
GPU path on ``pooling.comp``.

Max pooling keeps ncnn's NaN behaviour: pooling.cpp starts from the window's first value and
folds ``max = std::max(max, v)``, i.e. ``max < v ? v : max``, so a NaN comes out only when it
is the first value of the window (a padded window starts on -FLT_MAX).
"""

from __future__ import annotations

import math

import numpy as np

from . import _line_shaders
from ._base import Layer, Shape
from ._device_choice import FLAT_LOCAL
from ._geometry import as_chw, border, same_pads
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    capped_groups,
    fold_groups,
    pack_push,
)
from ._limits import MAX_EXTENT, MAX_KERNEL, MAX_PAD, MAX_STRIDE
from ._registry import register_layer
from ._schema import Param

POOL_MAX = 0
POOL_AVE = 1
# pooling.comp's outputs flat along x: where the device's choices say (pooling_flat)
FLT_MAX = float(np.finfo(np.float32).max)


def _windows(x: np.ndarray, kh: int, kw: int, sh: int, sw: int, oh: int, ow: int) -> np.ndarray:
    """Read-only (c, oh, ow, kh, kw) view of every pooling window."""
    x = np.ascontiguousarray(x)
    s_c, s_h, s_w = x.strides
    return np.lib.stride_tricks.as_strided(
        x,
        shape=(x.shape[0], oh, ow, kh, kw),
        strides=(s_c, s_h * sh, s_w * sw, s_h, s_w),
        writeable=False,
    )


def ncnn_max(values: np.ndarray, first: np.ndarray, axis: int | tuple[int, ...]) -> np.ndarray:
    """ncnn's ``max = first; for v: max = std::max(max, v)`` over ``axis``: NaN when ``first``
    is NaN, else the largest value that is not NaN."""
    largest = np.fmax.reduce(values, axis=axis)
    return np.where(np.isnan(first), first, largest).astype(np.float32)


def _valid_counts(n_out: int, stride: int, k: int, lo: int, hi: int) -> np.ndarray:
    """Per output index: how many taps of the window fall in [lo, hi) (ncnn's area loop)."""
    start = np.arange(n_out) * stride
    return np.clip(np.minimum(start + k, hi) - np.maximum(start, lo), 0, None)


@register_layer("Pooling")
class Pooling(Layer):
    """0 type, 1/11 kernel, 2/12 stride, 3/14/13/15 pads (l/r/t/b), 4 global, 5 pad_mode,
    6 avgpool_count_include_pad, 7 adaptive, 8/18 out_w/out_h.
    """

    pooling_type = Param(0, int, POOL_MAX)
    kernel_w = Param(1, int, 0, limit=MAX_KERNEL)
    kernel_h = Param(11, int, kernel_w, limit=MAX_KERNEL)
    stride_w = Param(2, int, 1, limit=MAX_STRIDE)
    stride_h = Param(12, int, stride_w, limit=MAX_STRIDE)
    pad_left = Param(3, int, 0, limit=MAX_PAD)
    pad_right = Param(14, int, pad_left, limit=MAX_PAD)
    pad_top = Param(13, int, pad_left, limit=MAX_PAD)
    pad_bottom = Param(15, int, pad_top, limit=MAX_PAD)
    global_pooling = Param(4, int, 0)
    pad_mode = Param(5, int, 0)
    avgpool_count_include_pad = Param(6, int, 0)
    adaptive_pooling = Param(7, int, 0)
    out_w = Param(8, int, 0, limit=MAX_EXTENT)
    out_h = Param(18, int, out_w, limit=MAX_EXTENT)

    gpu = True

    def validate(self) -> None:
        if self.pooling_type not in (POOL_MAX, POOL_AVE):
            raise ValueError(f"param 0 pooling_type={self.pooling_type} must be 0 (max) or 1 (avg)")
        if self.global_pooling or self.adaptive_pooling:
            return
        if self.pad_mode not in (0, 1, 2, 3):
            raise ValueError(f"param 5 pad_mode={self.pad_mode} must be 0..3")
        if self.kernel_w <= 0 or self.kernel_h <= 0:
            raise ValueError(f"params 1/11 kernel {self.kernel_w}x{self.kernel_h} must be > 0")
        if self.stride_w <= 0 or self.stride_h <= 0:
            raise ValueError("params 2/12 stride must be > 0")
        if min(self.pad_left, self.pad_right, self.pad_top, self.pad_bottom) < 0:
            raise ValueError("params 3/14/13/15 pads must be >= 0")

    # -- shapes ------------------------------------------------------------------------------

    def padding(self, h: int, w: int) -> tuple[int, int, int, int, int, int]:
        """(top, bottom, left, right, htailpad, wtailpad) as ncnn's Pooling::make_padding.

        bottom/right include the tail pad that full mode (0) adds so the last window fits.
        """
        sh, sw = self.stride_h, self.stride_w
        if self.pad_mode == 0:
            # C's %: the sign follows the dividend
            wtail = int(math.fmod(w + self.pad_left + self.pad_right - self.kernel_w, sw))
            htail = int(math.fmod(h + self.pad_top + self.pad_bottom - self.kernel_h, sh))
            wtailpad = self.stride_w - wtail if wtail != 0 else 0
            htailpad = self.stride_h - htail if htail != 0 else 0
            return (
                self.pad_top,
                self.pad_bottom + htailpad,
                self.pad_left,
                self.pad_right + wtailpad,
                htailpad,
                wtailpad,
            )
        if self.pad_mode == 1:
            return self.pad_top, self.pad_bottom, self.pad_left, self.pad_right, 0, 0
        wpad = self.kernel_w + (w - 1) // self.stride_w * self.stride_w - w
        hpad = self.kernel_h + (h - 1) // self.stride_h * self.stride_h - h
        if wpad <= 0 and hpad <= 0:
            return 0, 0, 0, 0, 0, 0
        return (*same_pads(hpad, wpad, self.pad_mode == 2), 0, 0)

    def _adaptive_hw(self, h: int, w: int) -> tuple[int, int]:
        out_w = w if self.out_w == -233 else self.out_w
        out_h = h if self.out_h == -233 else self.out_h
        if out_w <= 0 or out_h <= 0:
            raise ValueError(f"params 8/18 adaptive output {out_w}x{out_h} must be > 0")
        return out_h, out_w

    def _padded_out(self, h: int, w: int) -> tuple[int, int, tuple[int, ...]]:
        pads = self.padding(h, w)
        hb, wb = h + pads[0] + pads[1], w + pads[2] + pads[3]
        if hb < self.kernel_h or wb < self.kernel_w:
            raise ValueError(f"input {h}x{w} (padded {hb}x{wb}) is smaller than the kernel")
        outh = (hb - self.kernel_h) // self.stride_h + 1
        return outh, (wb - self.kernel_w) // self.stride_w + 1, pads

    def output_shapes(self, input_shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        shape = tuple(input_shapes[0])
        if len(shape) not in (2, 3):
            raise ValueError(f"Pooling expects a dims 2 or 3 blob, got shape {shape}")
        c, h, w = (1, *shape) if len(shape) == 2 else shape
        if self.global_pooling:
            return [(c,)]
        if self.adaptive_pooling:
            out_h, out_w = self._adaptive_hw(h, w)
            if (out_h, out_w) == (h, w):
                return [shape]
            return [(c, out_h, out_w)]
        outh, outw, _ = self._padded_out(h, w)
        return [(c, outh, outw)]

    # -- compute -----------------------------------------------------------------------------

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x0 = np.asarray(inputs[0], np.float32)
        self.output_shapes([x0.shape])
        x = as_chw(x0)
        c, h, w = x.shape
        if self.global_pooling:
            flat = x.reshape(c, h * w)
            if self.pooling_type == POOL_MAX:
                return [ncnn_max(flat, flat[:, 0], axis=1)]
            return [(flat.sum(axis=1, dtype=np.float32) / np.float32(h * w)).astype(np.float32)]
        if self.adaptive_pooling:
            out_h, out_w = self._adaptive_hw(h, w)
            if (out_h, out_w) == (h, w):
                return [x0.copy()]
            return [self._adaptive(x, out_h, out_w)]
        return [self._pool(x)]

    def _adaptive(self, x: np.ndarray, out_h: int, out_w: int) -> np.ndarray:
        """Bins [floor(i*h/out), ceil((i+1)*h/out)); reduce rows, then columns (max: NaN only
        where the bin's first value is NaN, as ncnn)."""
        c, h, w = x.shape
        reduce = np.fmax.reduce if self.pooling_type == POOL_MAX else np.sum
        rows = np.empty((c, out_h, w), np.float32)
        hk = np.empty(out_h, np.float32)
        row0 = np.empty(out_h, np.int64)
        for i in range(out_h):
            ih0, ih1 = h * i // out_h, (h * (i + 1) + out_h - 1) // out_h
            rows[:, i] = reduce(x[:, ih0:ih1], axis=1)
            hk[i] = ih1 - ih0
            row0[i] = ih0
        out = np.empty((c, out_h, out_w), np.float32)
        wk = np.empty(out_w, np.float32)
        col0 = np.empty(out_w, np.int64)
        for j in range(out_w):
            iw0, iw1 = w * j // out_w, (w * (j + 1) + out_w - 1) // out_w
            out[:, :, j] = reduce(rows[:, :, iw0:iw1], axis=2)
            wk[j] = iw1 - iw0
            col0[j] = iw0
        if self.pooling_type == POOL_AVE:
            return (out / hk[:, None] / wk[None, :]).astype(np.float32, copy=False)
        first = x[:, row0][:, :, col0]
        return np.where(np.isnan(first), first, out).astype(np.float32, copy=False)

    def _pool(self, x: np.ndarray) -> np.ndarray:
        h, w = x.shape[1:]
        outh, outw, pads = self._padded_out(h, w)
        top, bottom, left, right, htailpad, wtailpad = pads
        kh, kw, sh, sw = self.kernel_h, self.kernel_w, self.stride_h, self.stride_w
        if self.pooling_type == POOL_MAX:
            xb = border(x, top, bottom, left, right, -FLT_MAX)
            windows = _windows(xb, kh, kw, sh, sw, outh, outw)
            return ncnn_max(windows, windows[:, :, :, 0, 0], axis=(3, 4))
        xb = border(x, top, bottom, left, right, 0.0)
        if self.avgpool_count_include_pad:
            total = _windows(xb, kh, kw, sh, sw, outh, outw).sum(axis=(3, 4), dtype=np.float32)
            return (total / np.float32(kh * kw)).astype(np.float32)
        # ncnn counts only taps inside [pad_top, h_b - pad_bottom - htailpad) (the *param* pads,
        # even in SAME modes where the real padding was computed), and sums only those taps
        hb, wb = xb.shape[1:]
        y_lo, y_hi = self.pad_top, hb - self.pad_bottom - htailpad
        x_lo, x_hi = self.pad_left, wb - self.pad_right - wtailpad
        masked = np.zeros_like(xb)
        if y_hi > y_lo and x_hi > x_lo:
            masked[:, y_lo:y_hi, x_lo:x_hi] = xb[:, y_lo:y_hi, x_lo:x_hi]
        total = _windows(masked, kh, kw, sh, sw, outh, outw).sum(axis=(3, 4), dtype=np.float32)
        area = np.outer(
            _valid_counts(outh, sh, kh, y_lo, y_hi), _valid_counts(outw, sw, kw, x_lo, x_hi)
        ).astype(np.float32)
        with np.errstate(divide="ignore", invalid="ignore"):
            return (total / area).astype(np.float32)

    # -- GPU (pooling.comp; ncnn's pad modes worked out on the host) ---------------------------

    def supports(self, input_shapes: list[Shape]) -> bool:
        return len(input_shapes[0]) == 3 and self.pooling_type in (0, 1)

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        # ncnn excludes only the pads named by params (and the full mode's tail); SAME modes
        # compute their pads, which it then counts, so they divide by the kernel area.
        include = 1 if self.pad_mode in (2, 3) else self.avgpool_count_include_pad
        flat = target.info.takes(target.info.choices.pooling_flat)
        spec = (self.pooling_type, include, self.adaptive_pooling, int(flat))
        specs = {"pool": PipelineSpec("pooling", spec, FLAT_LOCAL if flat else (8, 8, 1))}
        if self._global_lines(target):
            local = _line_shaders.local_size(target.info)
            specs["pool_global"] = PipelineSpec("pooling_global", (self.pooling_type,), local)
        return specs

    def _global_lines(self, target: GpuTarget) -> bool:
        return bool(self.global_pooling) and _line_shaders.offered(target.info)

    def background_pipelines(self, target: GpuTarget) -> frozenset[str]:
        """A workgroup per channel for global pooling: faster on large maps, not worth a cold
        load's wait."""
        return _POOL_GLOBAL if self._global_lines(target) else frozenset()

    def _gpu_pads(self, w: int, h: int) -> tuple[int, int, int, int]:
        """(left, top, right, bottom) as ncnn's make_padding; tail pads are not counted."""
        if self.pad_mode in (2, 3):
            wpad = self.kernel_w + (w - 1) // self.stride_w * self.stride_w - w
            hpad = self.kernel_h + (h - 1) // self.stride_h * self.stride_h - h
            wpad, hpad = max(wpad, 0), max(hpad, 0)
            if self.pad_mode == 2:
                return (wpad // 2, hpad // 2, wpad - wpad // 2, hpad - hpad // 2)
            return (wpad - wpad // 2, hpad - hpad // 2, wpad // 2, hpad // 2)
        return (self.pad_left, self.pad_top, self.pad_right, self.pad_bottom)

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        c, h, w = inputs[0].shape
        out = outputs[0].shape
        if (
            self.global_pooling
            and _line_shaders.chosen(ctx.info, c, h * w)
            and ctx.has_pipeline("pool_global")
        ):
            groups = fold_groups(c, ctx.info)
            ctx.dispatch("pool_global", [inputs[0], outputs[0]], pack_push("2i", h * w, c), groups)
            return
        if self.global_pooling:
            kw, kh, sw, sh = w, h, 1, 1
            pads = (0, 0, 0, 0)
            ow = oh = 1
        else:
            kw, kh, sw, sh = self.kernel_w, self.kernel_h, self.stride_w, self.stride_h
            pads = self._gpu_pads(w, h)
            oh, ow = (out[1], out[2]) if len(out) == 3 else (1, 1)
        push = pack_push("13i", w, h, c, ow, oh, kw, kh, sw, sh, *pads)
        if ctx.spec("pool").specializations[3]:  # flat outputs, as chosen at load
            wanted = (math.ceil(ow * oh * c / FLAT_LOCAL[0]), 1, 1)
        else:
            wanted = (math.ceil(ow / 8), math.ceil(oh / 8), c)
        ctx.dispatch("pool", [inputs[0], outputs[0]], push, capped_groups(wanted, ctx.info))


_POOL_GLOBAL = frozenset({"pool_global"})
