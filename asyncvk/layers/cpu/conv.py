"""Convolution, ConvolutionDepthWise, Deconvolution(DepthWise) and InnerProduct in numpy.

Convolution is im2col (a strided view, copied once) plus one batched matmul over the groups;
Deconvolution is one matmul plus a scatter-add per kernel tap. Weights keep ncnn's order:
(num_output, num_input / group, kernel_h, kernel_w), flattened.
"""

from __future__ import annotations

import numpy as np

from .._base import Layer, ModelBin
from .._limits import (
    MAX_BLOB_ELEMENTS,
    MAX_CHANNELS,
    MAX_EXTENT,
    MAX_KERNEL,
    MAX_PAD,
    MAX_STRIDE,
    check_elements,
    check_params,
)
from .._paramdict import ParamDict
from .._registry import register_layer
from .activation import fused_activation, validate_activation

SAME_UPPER = -233
SAME_LOWER = -234
#: im2col columns made at once (elements): a large input is convolved in bands of rows.
IM2COL_BUDGET = 1 << 24


def as_chw(x: np.ndarray) -> np.ndarray:
    """A dims-2 blob is one channel to ncnn's 2-D layers; dims 3 is used as is."""
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 2:
        return x[None]
    if x.ndim != 3:
        raise ValueError(f"expected a dims 2 or 3 blob, got shape {x.shape}")
    return x


def _chw_shape(shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(shape) == 2:
        return 1, shape[0], shape[1]
    if len(shape) != 3:
        raise ValueError(f"expected a dims 2 or 3 blob, got shape {shape}")
    return shape[0], shape[1], shape[2]


def _check_pads(pads: tuple[int, int, int, int]) -> None:
    """ncnn only understands pads >= 0, or all four -233 / -234."""
    if all(p >= 0 for p in pads) or all(p == SAME_UPPER for p in pads):
        return
    if all(p == SAME_LOWER for p in pads):
        return
    raise ValueError(f"params 4/15/14/16 pads {pads}: use values >= 0, or all -233 or all -234")


class _ConvParams(Layer):
    """The param ids shared by the Convolution family (ncnn's convolution.cpp)."""

    has_group = False

    def __init__(self) -> None:
        super().__init__()
        self.num_output = 0
        self.kernel_w = self.kernel_h = 0
        self.dilation_w = self.dilation_h = 1
        self.stride_w = self.stride_h = 1
        self.pad_left = self.pad_right = self.pad_top = self.pad_bottom = 0
        self.bias_term = 0
        self.weight_data_size = 0
        self.group = 1
        self.activation_type = 0
        self.activation_params: tuple[float, ...] = ()
        self.weight = np.zeros(0, np.float32)
        self.bias: np.ndarray | None = None

    def _load_common(self, pd: ParamDict) -> None:
        self.num_output = pd.get_int(0, 0)
        self.kernel_w = pd.get_int(1, 0)
        self.kernel_h = pd.get_int(11, self.kernel_w)
        self.dilation_w = pd.get_int(2, 1)
        self.dilation_h = pd.get_int(12, self.dilation_w)
        self.stride_w = pd.get_int(3, 1)
        self.stride_h = pd.get_int(13, self.stride_w)
        self.pad_left = pd.get_int(4, 0)
        self.pad_right = pd.get_int(15, self.pad_left)
        self.pad_top = pd.get_int(14, self.pad_left)
        self.pad_bottom = pd.get_int(16, self.pad_top)
        self.bias_term = pd.get_int(5, 0)
        self.weight_data_size = pd.get_int(6, 0)
        self.group = pd.get_int(7, 1) if self.has_group else 1
        self.activation_type = pd.get_int(9, 0)
        self.activation_params = pd.get_floats(10, ())
        kind = self.type_name
        check_params(
            kind, MAX_CHANNELS, (0, "num_output", self.num_output), (7, "group", self.group)
        )
        check_params(
            kind, MAX_KERNEL, (1, "kernel_w", self.kernel_w), (11, "kernel_h", self.kernel_h)
        )
        check_params(
            kind,
            MAX_STRIDE,
            (2, "dilation_w", self.dilation_w),
            (12, "dilation_h", self.dilation_h),
            (3, "stride_w", self.stride_w),
            (13, "stride_h", self.stride_h),
        )
        check_params(
            kind,
            MAX_PAD,
            (4, "pad_left", self.pad_left),
            (15, "pad_right", self.pad_right),
            (14, "pad_top", self.pad_top),
            (16, "pad_bottom", self.pad_bottom),
        )
        check_params(kind, MAX_BLOB_ELEMENTS, (6, "weight_data_size", self.weight_data_size))
        validate_activation(self.activation_type, self.activation_params)
        if self.num_output <= 0:
            raise ValueError(f"param 0 num_output={self.num_output} must be > 0")
        if self.kernel_w <= 0 or self.kernel_h <= 0:
            raise ValueError(f"params 1/11 kernel {self.kernel_w}x{self.kernel_h} must be > 0")
        if min(self.dilation_w, self.dilation_h, self.stride_w, self.stride_h) <= 0:
            raise ValueError("params 2/12 dilation and 3/13 stride must be > 0")
        if self.group <= 0 or self.num_output % self.group:
            raise ValueError(f"param 7 group={self.group} must divide num_output")
        _check_pads(self.pads)
        # every layout of the family holds num_output x (some channels) x kernel_h x kernel_w
        per_channel = self.num_output * self.maxk
        if self.weight_data_size <= 0 or self.weight_data_size % per_channel:
            raise ValueError(
                f"param 6 weight_data_size={self.weight_data_size} is not a positive multiple "
                f"of num_output x kernel_w x kernel_h = {per_channel}"
            )

    @property
    def pads(self) -> tuple[int, int, int, int]:
        return self.pad_left, self.pad_right, self.pad_top, self.pad_bottom

    @property
    def maxk(self) -> int:
        return self.kernel_w * self.kernel_h

    @property
    def kernel_extent(self) -> tuple[int, int]:
        """(extent_h, extent_w): the span a dilated kernel covers."""
        return (
            self.dilation_h * (self.kernel_h - 1) + 1,
            self.dilation_w * (self.kernel_w - 1) + 1,
        )

    def load_model(self, mb: ModelBin) -> None:
        self.weight = np.asarray(mb.load(self.weight_data_size, 0), np.float32)
        self.bias = np.asarray(mb.load(self.num_output, 1), np.float32) if self.bias_term else None

    def _inch_g(self, channels: int) -> int:
        """Input channels per group, checked against the weight size."""
        if channels % self.group:
            raise ValueError(f"{channels} input channels do not split into {self.group} groups")
        inch_g = channels // self.group
        if self.num_output * inch_g * self.maxk != self.weight_data_size:
            raise ValueError(
                f"weight_data_size {self.weight_data_size} does not match {channels} input "
                f"channels (num_output {self.num_output}, group {self.group}, "
                f"kernel {self.kernel_h}x{self.kernel_w})"
            )
        return inch_g

    def _finish(self, out: np.ndarray) -> np.ndarray:
        """Bias per output channel (axis 0), then the fused activation."""
        if self.bias is not None:
            out = out + self.bias.reshape((-1,) + (1,) * (out.ndim - 1))
        return fused_activation(out, self.activation_type, self.activation_params)


class _ConvBase(_ConvParams):
    """Convolution: 18 pad_value, 8 int8_scale_term (rejected), 19 dynamic_weight (rejected)."""

    def __init__(self) -> None:
        super().__init__()
        self.pad_value = 0.0

    def load_param(self, pd: ParamDict) -> None:
        self._load_common(pd)
        self.pad_value = pd.get_float(18, 0.0)
        if pd.get_int(8, 0) != 0:
            raise ValueError("param 8 int8_scale_term: int8 quantized layers are not supported")
        if pd.get_int(19, 0) != 0:
            raise ValueError("param 19 dynamic_weight: weights as inputs are not supported")

    def padding(self, h: int, w: int) -> tuple[int, int, int, int]:
        """(top, bottom, left, right) as ncnn's Convolution::make_padding."""
        ext_h, ext_w = self.kernel_extent
        if self.pad_left == SAME_UPPER or self.pad_left == SAME_LOWER:
            wpad = ext_w + (w - 1) // self.stride_w * self.stride_w - w
            hpad = ext_h + (h - 1) // self.stride_h * self.stride_h - h
            if wpad <= 0 and hpad <= 0:
                return 0, 0, 0, 0
            return same_pads(hpad, wpad, self.pad_left == SAME_UPPER)
        return self.pad_top, self.pad_bottom, self.pad_left, self.pad_right

    def _is_innerproduct(self, shape: tuple[int, ...]) -> bool:
        """ncnn's deprecated path: a 1-D blob through a 1x1 Convolution is an InnerProduct."""
        return (
            len(shape) == 1
            and self.kernel_w == 1
            and self.kernel_h == 1
            and shape[0] == self.weight_data_size // self.num_output
        )

    def _out_hw(self, h: int, w: int) -> tuple[int, int, tuple[int, int, int, int]]:
        top, bottom, left, right = self.padding(h, w)
        ext_h, ext_w = self.kernel_extent
        hb, wb = h + top + bottom, w + left + right
        if hb < ext_h or wb < ext_w:
            raise ValueError(f"input {h}x{w} (padded {hb}x{wb}) is smaller than the kernel")
        outh = (hb - ext_h) // self.stride_h + 1
        outw = (wb - ext_w) // self.stride_w + 1
        return outh, outw, (top, bottom, left, right)

    def output_shapes(self, input_shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        shape = tuple(input_shapes[0])
        if self._is_innerproduct(shape):
            return [(self.num_output,)]
        c, h, w = _chw_shape(shape)
        self._inch_g(c)
        outh, outw, _ = self._out_hw(h, w)
        return [(self.num_output, outh, outw)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x0 = np.asarray(inputs[0], np.float32)
        if self._is_innerproduct(x0.shape):
            wmat = self.weight.reshape(self.num_output, -1)
            return [self._finish(wmat @ x0)]
        x = as_chw(x0)
        c, h, w = x.shape
        inch_g = self._inch_g(c)
        outh, outw, (top, bottom, left, right) = self._out_hw(h, w)
        x = border(x, top, bottom, left, right, self.pad_value)
        g = self.group
        wgroups = self.weight.reshape(g, self.num_output // g, inch_g * self.maxk)
        out = np.empty((self.num_output, outh, outw), np.float32)
        # im2col copies every input pixel maxk times: bands of output rows bound that copy
        rows = max(1, IM2COL_BUDGET // max(1, c * self.maxk * outw))
        ext_h = self.kernel_extent[0]
        for y0 in range(0, outh, rows):
            band = min(rows, outh - y0)
            first = y0 * self.stride_h
            source = x[:, first : first + (band - 1) * self.stride_h + ext_h]
            cols = im2col(
                source, self.kernel_h, self.kernel_w, self.dilation_h, self.dilation_w,
                self.stride_h, self.stride_w, band, outw,
            )  # fmt: skip
            grouped = cols.reshape(g, inch_g * self.maxk, band * outw)
            out[:, y0 : y0 + band] = np.matmul(wgroups, grouped).reshape(-1, band, outw)
        return [self._finish(out)]


def _half(n: int) -> int:
    """C's ``n / 2`` (truncates toward zero, unlike ``//``)."""
    return n // 2 if n >= 0 else -(-n // 2)


def same_pads(hpad: int, wpad: int, upper: bool) -> tuple[int, int, int, int]:
    """(top, bottom, left, right) for SAME_UPPER (extra at the end) or SAME_LOWER.

    One side may be negative (a stride larger than the kernel): copy_make_border then crops.
    """
    if upper:
        return _half(hpad), hpad - _half(hpad), _half(wpad), wpad - _half(wpad)
    return hpad - _half(hpad), _half(hpad), wpad - _half(wpad), _half(wpad)


def border(x: np.ndarray, top: int, bottom: int, left: int, right: int, value: float) -> np.ndarray:
    """ncnn's copy_make_border(BORDER_CONSTANT) on (c, h, w); negative sides crop."""
    if top == bottom == left == right == 0:
        return x
    c, h, w = x.shape
    hb, wb = h + top + bottom, w + left + right
    check_elements(c * hb * wb, "the padded blob", (c, hb, wb))
    out = np.full((c, hb, wb), np.float32(value), np.float32)
    src_y0, dst_y0 = max(-top, 0), max(top, 0)
    src_x0, dst_x0 = max(-left, 0), max(left, 0)
    ny = min(h - src_y0, hb - dst_y0)
    nx = min(w - src_x0, wb - dst_x0)
    if ny > 0 and nx > 0:
        out[:, dst_y0 : dst_y0 + ny, dst_x0 : dst_x0 + nx] = x[
            :, src_y0 : src_y0 + ny, src_x0 : src_x0 + nx
        ]
    return out


def im2col(
    x: np.ndarray,
    kh: int,
    kw: int,
    dh: int,
    dw: int,
    sh: int,
    sw: int,
    outh: int,
    outw: int,
) -> np.ndarray:
    """(c, kh, kw, outh, outw) copy of every kernel tap's input, for one matmul."""
    x = np.ascontiguousarray(x)
    c = x.shape[0]
    s_c, s_h, s_w = x.strides
    view = np.lib.stride_tricks.as_strided(
        x,
        shape=(c, kh, kw, outh, outw),
        strides=(s_c, s_h * dh, s_w * dw, s_h * sh, s_w * sw),
        writeable=False,
    )
    return np.ascontiguousarray(view)


@register_layer("Convolution")
class Convolution(_ConvBase):
    """ncnn Convolution: params 0-6, 8-16, 18, 19; weights (out, in, kh, kw) then bias."""


@register_layer("ConvolutionDepthWise")
class ConvolutionDepthWise(_ConvBase):
    """ncnn ConvolutionDepthWise: Convolution plus 7 group (any group dividing both sides)."""

    has_group = True


class _DeconvBase(_ConvParams):
    """Deconvolution: 18/19 output_pad, 20/21 output_w/h, 28 dynamic_weight (rejected)."""

    def __init__(self) -> None:
        super().__init__()
        self.output_pad_right = self.output_pad_bottom = 0
        self.output_w = self.output_h = 0

    def load_param(self, pd: ParamDict) -> None:
        self._load_common(pd)
        self.output_pad_right = pd.get_int(18, 0)
        self.output_pad_bottom = pd.get_int(19, self.output_pad_right)
        self.output_w = pd.get_int(20, 0)
        self.output_h = pd.get_int(21, self.output_w)
        check_params(
            self.type_name,
            MAX_PAD,
            (18, "output_pad_right", self.output_pad_right),
            (19, "output_pad_bottom", self.output_pad_bottom),
        )
        check_params(
            self.type_name,
            MAX_EXTENT,
            (20, "output_w", self.output_w),
            (21, "output_h", self.output_h),
        )
        if pd.get_int(28, 0) != 0:
            raise ValueError("param 28 dynamic_weight: weights as inputs are not supported")
        if self.output_pad_right < 0 or self.output_pad_bottom < 0:
            raise ValueError("params 18/19 output_pad must be >= 0")
        if (
            self.output_w > 0
            and self.output_h > 0
            and max(self.pads) <= 0
            and self.pad_left not in (SAME_UPPER, SAME_LOWER)
        ):
            # ncnn's cut_padding leaves the top blob empty here: the layer fails
            raise ValueError("params 20/21 output_w/output_h need pads -233 or -234 (params 4..16)")

    def _full_hw(self, h: int, w: int) -> tuple[int, int]:
        ext_h, ext_w = self.kernel_extent
        return (
            (h - 1) * self.stride_h + ext_h + self.output_pad_bottom,
            (w - 1) * self.stride_w + ext_w + self.output_pad_right,
        )

    def cut(self, hf: int, wf: int) -> tuple[int, int, int, int]:
        """(top, bottom, left, right) to cut, as ncnn's Deconvolution::cut_padding."""
        if max(self.pads) > 0:
            return self.pad_top, self.pad_bottom, self.pad_left, self.pad_right
        if self.output_w > 0 and self.output_h > 0:
            wcut, hcut = wf - self.output_w, hf - self.output_h
            if wcut < 0 or hcut < 0:
                raise ValueError(
                    f"output_w/output_h {self.output_w}x{self.output_h} exceed the full "
                    f"deconvolution output {wf}x{hf}"
                )
            return same_pads(hcut, wcut, self.pad_left == SAME_UPPER)
        return 0, 0, 0, 0

    def _out_hw(self, h: int, w: int) -> tuple[int, int, int, int, tuple[int, int, int, int]]:
        hf, wf = self._full_hw(h, w)
        top, bottom, left, right = self.cut(hf, wf)
        outh, outw = hf - top - bottom, wf - left - right
        if outh <= 0 or outw <= 0:
            raise ValueError(f"pads cut the whole {hf}x{wf} deconvolution output")
        return hf, wf, outh, outw, (top, bottom, left, right)

    def output_shapes(self, input_shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        c, h, w = _chw_shape(tuple(input_shapes[0]))
        self._inch_g(c)
        _, _, outh, outw, _ = self._out_hw(h, w)
        return [(self.num_output, outh, outw)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = as_chw(inputs[0])
        c, h, w = x.shape
        inch_g = self._inch_g(c)
        hf, wf, outh, outw, (top, _, left, _) = self._out_hw(h, w)
        g, outch_g = self.group, self.num_output // self.group
        kh, kw = self.kernel_h, self.kernel_w
        check_elements(self.num_output * kh * kw * h * w, "the deconvolution's tap products")
        check_elements(self.num_output * hf * wf, "the uncut deconvolution output")
        # weight[g][p][q][k]: contribution[g, p, k, pixel] = sum_q weight * x[g, q, pixel]
        wmat = self.weight.reshape(g, outch_g, inch_g, kh * kw).transpose(0, 1, 3, 2)
        xg = x.reshape(g, inch_g, h * w)
        contrib = np.matmul(wmat.reshape(g, outch_g * kh * kw, inch_g), xg)
        contrib = contrib.reshape(self.num_output, kh, kw, h, w)
        full = np.zeros((self.num_output, hf, wf), np.float32)
        span_h, span_w = (h - 1) * self.stride_h + 1, (w - 1) * self.stride_w + 1
        for i in range(kh):
            y0 = i * self.dilation_h
            for j in range(kw):
                x0 = j * self.dilation_w
                full[:, y0 : y0 + span_h : self.stride_h, x0 : x0 + span_w : self.stride_w] += (
                    contrib[:, i, j]
                )
        out = self._finish(full)
        return [np.ascontiguousarray(out[:, top : top + outh, left : left + outw])]


@register_layer("Deconvolution")
class Deconvolution(_DeconvBase):
    """ncnn Deconvolution: scatter input * weight[out][in][k] (no kernel flip), then cut pads."""


@register_layer("DeconvolutionDepthWise")
class DeconvolutionDepthWise(_DeconvBase):
    """ncnn DeconvolutionDepthWise: Deconvolution plus 7 group."""

    has_group = True


@register_layer("InnerProduct")
class InnerProduct(Layer):
    """0 num_output, 1 bias_term, 2 weight_data_size, 8 int8 (rejected), 9/10 activation.

    A dims-2 blob whose width is num_input is a batch of rows (gemm); anything else is
    flattened whole and gives a 1-D blob.
    """

    def __init__(self) -> None:
        super().__init__()
        self.num_output = 0
        self.bias_term = 0
        self.weight_data_size = 0
        self.activation_type = 0
        self.activation_params: tuple[float, ...] = ()
        self.weight = np.zeros((0, 0), np.float32)
        self.bias: np.ndarray | None = None

    def load_param(self, pd: ParamDict) -> None:
        self.num_output = pd.get_int(0, 0)
        self.bias_term = pd.get_int(1, 0)
        self.weight_data_size = pd.get_int(2, 0)
        if pd.get_int(8, 0) != 0:
            raise ValueError("param 8 int8_scale_term: int8 quantized layers are not supported")
        self.activation_type = pd.get_int(9, 0)
        self.activation_params = pd.get_floats(10, ())
        check_params(self.type_name, MAX_CHANNELS, (0, "num_output", self.num_output))
        check_params(
            self.type_name, MAX_BLOB_ELEMENTS, (2, "weight_data_size", self.weight_data_size)
        )
        validate_activation(self.activation_type, self.activation_params)
        if self.weight_data_size <= 0:
            raise ValueError(f"param 2 weight_data_size={self.weight_data_size} must be > 0")
        if self.num_output <= 0 or self.weight_data_size % self.num_output:
            raise ValueError(
                f"param 0 num_output={self.num_output} must be > 0 and divide "
                f"param 2 weight_data_size={self.weight_data_size}"
            )

    @property
    def num_input(self) -> int:
        return self.weight_data_size // self.num_output

    def load_model(self, mb: ModelBin) -> None:
        w = np.asarray(mb.load(self.weight_data_size, 0), np.float32)
        self.weight = w.reshape(self.num_output, self.num_input)
        self.bias = np.asarray(mb.load(self.num_output, 1), np.float32) if self.bias_term else None

    def output_shapes(self, input_shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        shape = tuple(input_shapes[0])
        if len(shape) == 2 and shape[1] == self.num_input:
            return [(shape[0], self.num_output)]
        if int(np.prod(shape)) != self.num_input:
            raise ValueError(f"input {shape} does not flatten to num_input {self.num_input}")
        return [(self.num_output,)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], np.float32)
        self.output_shapes([x.shape])
        if x.ndim == 2 and x.shape[1] == self.num_input:
            out = x @ self.weight.T
            if self.bias is not None:
                out = out + self.bias
        else:
            out = self.weight @ x.reshape(-1)
            if self.bias is not None:
                out = out + self.bias
        return [fused_activation(out, self.activation_type, self.activation_params)]
