"""Layers that move data without arithmetic: Split, Concat, Slice, Crop, Padding, Reshape,
Flatten, Permute, ShuffleChannel, PixelShuffle.

Each mirrors the ncnn layer of the same name (src/layer/*.cpp), including its parameter
defaults and its quirks (e.g. Crop's ``end == 0`` meaning "to the end"), because the GPU
shaders are checked against these.
"""

from __future__ import annotations

import numpy as np

from .._base import BlobCount, Layer, ModelBin, ShareInputOnGpu
from .._limits import MAX_CHANNELS, MAX_EXTENT, MAX_PAD, MAX_STRIDE, check_params
from .._paramdict import ParamDict
from .._registry import register_layer

_F32 = np.float32
Shape = tuple[int, ...]


def mat_whdc(shape: Shape) -> tuple[int, int, int, int]:
    """ncnn's ``(w, h, d, c)`` of a numpy blob shape; missing dims are 1, as in ncnn::Mat."""
    dims = len(shape)
    if dims == 1:
        return shape[0], 1, 1, 1
    if dims == 2:
        return shape[1], shape[0], 1, 1
    if dims == 3:
        return shape[2], shape[1], 1, shape[0]
    if dims == 4:
        return shape[3], shape[2], shape[1], shape[0]
    raise ValueError(f"blob shape {shape} is not 1..4-D")


def _positive_axis(axis: int, dims: int, what: str) -> int:
    """Resolve a negative axis as ncnn does and check it is in range."""
    pos = axis + dims if axis < 0 else axis
    if not 0 <= pos < dims:
        raise ValueError(f"{what}: axis {axis} out of range for a {dims}-D blob")
    return pos


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=_F32)


@register_layer("Split")
class Split(ShareInputOnGpu):
    """One input, copied to every top (ncnn shares the data; copies keep inputs untouched)."""

    one_blob_only = False

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (1, 1), (1, None)

    def _count(self) -> int:
        return max(len(self.tops), 1)

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = _f32(inputs[0])
        return [x.copy() for _ in range(self._count())]

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        return [tuple(input_shapes[0])] * self._count()


@register_layer("Concat")
class Concat(Layer):
    """Join inputs along ``axis`` (param 0); all other dims must match."""

    one_blob_only = False

    def __init__(self) -> None:
        super().__init__()
        self.axis = 0

    def load_param(self, pd: ParamDict) -> None:
        self.axis = pd.get_int(0, 0)

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (1, None), (1, 1)

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shapes = [tuple(s) for s in input_shapes]
        dims = len(shapes[0])
        axis = _positive_axis(self.axis, dims, "Concat")
        first = shapes[0]
        for s in shapes:
            others = [n for i, n in enumerate(s) if i != axis]
            if len(s) != dims or others != [n for i, n in enumerate(first) if i != axis]:
                raise ValueError(f"Concat: shapes {shapes} do not match off axis {self.axis}")
        out = list(shapes[0])
        out[axis] = sum(s[axis] for s in shapes)
        return [tuple(out)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        self.output_shapes([x.shape for x in inputs])
        axis = _positive_axis(self.axis, inputs[0].ndim, "Concat")
        return [np.concatenate([_f32(x) for x in inputs], axis=axis)]


@register_layer("Slice")
class Slice(Layer):
    """Cut one input along ``axis`` (1) by ``slices`` (0; -233 = even share of the rest) or by
    split ``indices`` (2)."""

    one_blob_only = False

    def __init__(self) -> None:
        super().__init__()
        self.slices: tuple[int, ...] = ()
        self.axis = 0
        self.indices: tuple[int, ...] = ()

    def load_param(self, pd: ParamDict) -> None:
        self.slices = pd.get_ints(0, ())
        self.axis = pd.get_int(1, 0)
        self.indices = pd.get_ints(2, ())
        if not self.slices and not self.indices:
            raise ValueError("Slice: param 0 slices or param 2 indices is required")

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (1, 1), (1, None)

    def check_blob_counts(self, bottoms: int, tops: int) -> None:
        super().check_blob_counts(bottoms, tops)
        # ncnn reads slices[i] (or indices[i]) for each top, unchecked
        if self.indices and len(self.indices) < tops - 1:
            raise ValueError(
                f"Slice: param 2 indices has {len(self.indices)} values for {tops} outputs "
                f"(needs {tops - 1})"
            )
        if not self.indices and len(self.slices) < tops:
            raise ValueError(
                f"Slice: param 0 slices has {len(self.slices)} values for {tops} outputs"
            )

    def _count(self) -> int:
        if self.tops:
            return len(self.tops)
        return len(self.indices) + 1 if self.indices else len(self.slices)

    def _sizes(self, shape: Shape) -> tuple[int, list[int]]:
        axis = _positive_axis(self.axis, len(shape), "Slice")
        n = shape[axis]
        count = self._count()
        sizes: list[int] = []
        q = 0
        for i in range(count):
            if self.indices:
                if i == count - 1:
                    size = n - q
                else:
                    idx = self.indices[i]
                    size = (n + idx if idx < 0 else idx) - q
            else:
                size = self.slices[i]
                if size == -233:
                    size = (n - q) // (count - i)
            if size < 0 or q + size > n:
                raise ValueError(f"Slice: slice {i} of size {size} does not fit axis size {n}")
            sizes.append(size)
            q += size
        return axis, sizes

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        axis, sizes = self._sizes(shape)
        return [(*shape[:axis], s, *shape[axis + 1 :]) for s in sizes]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = _f32(inputs[0])
        axis, sizes = self._sizes(x.shape)
        outs = []
        q = 0
        for s in sizes:
            index = [slice(None)] * x.ndim
            index[axis] = slice(q, q + s)
            outs.append(x[tuple(index)].copy())
            q += s
        return outs


@register_layer("Crop")
class Crop(Layer):
    """Cut a box: offsets + sizes (0/1/13/2, 3/4/14/5), offsets from both ends (6/7/15/8),
    numpy-style starts/ends/axes (9/10/11), or the size of a second (reference) input."""

    one_blob_only = False

    def __init__(self) -> None:
        super().__init__()
        self.woffset = self.hoffset = self.doffset = self.coffset = 0
        self.outw = self.outh = self.outd = self.outc = 0
        self.woffset2 = self.hoffset2 = self.doffset2 = self.coffset2 = 0
        self.starts: tuple[int, ...] = ()
        self.ends: tuple[int, ...] = ()
        self.axes: tuple[int, ...] = ()

    def load_param(self, pd: ParamDict) -> None:
        self.woffset = pd.get_int(0, 0)
        self.hoffset = pd.get_int(1, 0)
        self.doffset = pd.get_int(13, 0)
        self.coffset = pd.get_int(2, 0)
        self.outw = pd.get_int(3, 0)
        self.outh = pd.get_int(4, 0)
        self.outd = pd.get_int(14, 0)
        self.outc = pd.get_int(5, 0)
        self.woffset2 = pd.get_int(6, 0)
        self.hoffset2 = pd.get_int(7, 0)
        self.doffset2 = pd.get_int(15, 0)
        self.coffset2 = pd.get_int(8, 0)
        self.starts = pd.get_ints(9, ())
        self.ends = pd.get_ints(10, ())
        self.axes = pd.get_ints(11, ())
        for key in (19, 20, 21):
            if pd.get_str(key, ""):
                raise ValueError(f"Crop: param {key} (expression) unsupported")
        check_params(
            self.type_name,
            MAX_EXTENT,
            (0, "woffset", self.woffset),
            (1, "hoffset", self.hoffset),
            (13, "doffset", self.doffset),
            (2, "coffset", self.coffset),
            (3, "outw", self.outw),
            (4, "outh", self.outh),
            (14, "outd", self.outd),
            (5, "outc", self.outc),
            (6, "woffset2", self.woffset2),
            (7, "hoffset2", self.hoffset2),
            (15, "doffset2", self.doffset2),
            (8, "coffset2", self.coffset2),
        )

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        """A second input is the reference, read exactly when no size param is given."""
        return ((2, 2) if self.uses_reference else (1, 1)), (1, 1)

    @property
    def _numpy_style(self) -> bool:
        return bool(self.starts) and bool(self.ends)

    @property
    def uses_reference(self) -> bool:
        """True when ncnn takes the crop size from a second input blob."""
        sizes = (self.outw, self.outh, self.outd, self.outc)
        offsets2 = (self.woffset2, self.hoffset2, self.doffset2, self.coffset2)
        return not any(sizes) and not any(offsets2) and not self._numpy_style

    def _roi_self(self, shape: Shape) -> tuple[list[int], list[int]]:
        """resolve_crop_roi(bottom): offsets and sizes as ``[w, h, d, c]`` lists."""
        w, h, d, c = mat_whdc(shape)
        dims = len(shape)
        off = [0, 0, 0, 0]
        size = [w, h, d, c]
        full = [w, h, d, c]
        if self._numpy_style:
            # ncnn's axis numbering per dims -> index into [w, h, d, c]
            slot = {1: [0], 2: [1, 0], 3: [3, 1, 0], 4: [3, 2, 1, 0]}[dims]
            if self.axes:
                axes = [a + dims if a < 0 else a for a in self.axes]
            else:
                axes = list(range(dims))
            if len(self.starts) < len(axes) or len(self.ends) < len(axes):
                raise ValueError("Crop: params 9/10 need a start and an end per axis")
            for i, axis in enumerate(axes):
                if not 0 <= axis < dims:
                    raise ValueError(f"Crop: param 11 axis {self.axes[i]} out of range")
                k = slot[0] if dims == 1 else slot[axis]
                n = full[k]
                start, end = self.starts[i], self.ends[i]
                if start == -233:
                    start = 0
                if end == -233:
                    end = n
                off[k] = start if start >= 0 else n + start
                size[k] = min(n, end if end > 0 else n + end) - off[k]
            return off, size
        off = [self.woffset, self.hoffset, self.doffset, self.coffset]
        outs = [self.outw, self.outh, self.outd, self.outc]
        off2 = [self.woffset2, self.hoffset2, self.doffset2, self.coffset2]
        active = {1: [0], 2: [0, 1], 3: [0, 1, 3], 4: [0, 1, 2, 3]}[dims]
        for k in active:
            size[k] = full[k] - off[k] - off2[k]
            if outs[k] != -233:
                size[k] = min(outs[k], size[k])
        return off, size

    def _roi_ref(self, shape: Shape, ref: Shape) -> tuple[list[int], list[int]]:
        """resolve_crop_roi(bottom, reference): take the reference blob's sizes."""
        w, h, d, c = mat_whdc(shape)
        rw, rh, rd, rc = mat_whdc(ref)
        dims = len(shape)
        off = [self.woffset, self.hoffset, self.doffset, self.coffset]
        size = [w, h, d, c]
        size[0] = rw
        if dims >= 2:
            size[1] = rh
        if dims == 3:
            size[3] = rc if len(ref) == 3 else c
        if dims == 4:
            size[2] = rd
            size[3] = rc if len(ref) == 4 else c
        return off, size

    @staticmethod
    def _roi_data(shape: Shape, data: np.ndarray) -> tuple[list[int], list[int]]:
        """resolve_crop_roi(bottom, int*): offsets and sizes packed in the reference blob."""
        p = np.ascontiguousarray(data, dtype=_F32).reshape(-1).view(np.int32)
        w, h, d, c = mat_whdc(shape)
        off = [0, 0, 0, 0]
        size = [w, h, d, c]
        dims = len(shape)
        if dims == 1:
            off[0], size[0] = int(p[0]), int(p[3])
        elif dims == 2:
            off[0], off[1], size[0], size[1] = (int(v) for v in (p[0], p[1], p[3], p[4]))
        elif dims == 3:
            off[0], off[1], off[3] = int(p[0]), int(p[1]), int(p[2])
            size[0], size[1], size[3] = int(p[3]), int(p[4]), int(p[5])
        else:
            off = [int(p[0]), int(p[1]), int(p[2]), int(p[3])]
            size = [int(p[4]), int(p[5]), int(p[6]), int(p[7])]
        return off, size

    def _roi(
        self, shape: Shape, ref: Shape | None, ref_data: np.ndarray | None
    ) -> tuple[list[int], list[int]]:
        if ref is not None and self.uses_reference:
            if self.woffset == -233:
                if ref_data is None:
                    raise ValueError("Crop: woffset -233 takes the crop box from blob data")
                off, size = self._roi_data(shape, ref_data)
            else:
                off, size = self._roi_ref(shape, ref)
        else:
            off, size = self._roi_self(shape)
        full = mat_whdc(shape)
        for k in range(4):
            if size[k] == full[k]:
                off[k] = 0  # ncnn copies a full-size dim whole, whatever its offset
            if off[k] < 0 or size[k] <= 0 or off[k] + size[k] > full[k]:
                raise ValueError(f"Crop: box offset {off} size {size} does not fit {shape}")
        return off, size

    @staticmethod
    def _numpy_box(dims: int, off: list[int], size: list[int]) -> tuple[slice, ...]:
        order = {1: [0], 2: [1, 0], 3: [3, 1, 0], 4: [3, 2, 1, 0]}[dims]
        return tuple(slice(off[k], off[k] + size[k]) for k in order)

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        ref = tuple(input_shapes[1]) if len(input_shapes) > 1 else None
        off, size = self._roi(shape, ref, None)
        box = self._numpy_box(len(shape), off, size)
        return [tuple(s.stop - s.start for s in box)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = _f32(inputs[0])
        ref = inputs[1] if len(inputs) > 1 else None
        off, size = self._roi(x.shape, None if ref is None else tuple(ref.shape), ref)
        return [x[self._numpy_box(x.ndim, off, size)].copy()]


@register_layer("Padding")
class Padding(Layer):
    """Pad the borders: constant (per-channel values optional), replicate or reflect."""

    def __init__(self) -> None:
        super().__init__()
        self.top = self.bottom = self.left = self.right = 0
        self.front = self.behind = 0
        self.type = 0
        self.value = 0.0
        self.per_channel_pad_data_size = 0
        self.per_channel_pad_data = np.zeros(0, dtype=_F32)

    def load_param(self, pd: ParamDict) -> None:
        self.top = pd.get_int(0, 0)
        self.bottom = pd.get_int(1, 0)
        self.left = pd.get_int(2, 0)
        self.right = pd.get_int(3, 0)
        self.type = pd.get_int(4, 0)
        self.value = pd.get_float(5, 0.0)
        self.per_channel_pad_data_size = pd.get_int(6, 0)
        self.front = pd.get_int(7, 0)
        self.behind = pd.get_int(8, 0)
        check_params(
            self.type_name,
            MAX_PAD,
            (0, "top", self.top),
            (1, "bottom", self.bottom),
            (2, "left", self.left),
            (3, "right", self.right),
            (7, "front", self.front),
            (8, "behind", self.behind),
        )
        check_params(
            self.type_name,
            MAX_CHANNELS,
            (6, "per_channel_pad_data_size", self.per_channel_pad_data_size),
        )
        if self.type not in (0, 1, 2):
            raise ValueError(f"Padding: param 4 type={self.type} unsupported")
        pads = (self.top, self.bottom, self.left, self.right, self.front, self.behind)
        if min(pads) < 0:
            raise ValueError(f"Padding: negative pads {pads} unsupported")

    def load_model(self, mb: ModelBin) -> None:
        if self.per_channel_pad_data_size:
            data = mb.load(self.per_channel_pad_data_size, 1)
            self.per_channel_pad_data = np.asarray(data, dtype=_F32).reshape(-1)

    def _pads(self, dims: int) -> list[tuple[int, int]]:
        """(before, after) per numpy axis; front/behind pad c for 3-D and d for 4-D."""
        hw = [(self.top, self.bottom), (self.left, self.right)]
        fb = (self.front, self.behind)
        if dims == 1:
            return [(self.left, self.right)]
        if dims == 2:
            return hw
        if dims == 3:
            return [fb, *hw]
        return [(0, 0), fb, *hw]

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        if len(shape) > 4:
            raise ValueError(f"Padding: blob shape {shape} is not 1..4-D")
        pads = self._pads(len(shape))
        if self.type == 2:
            for n, (a, b) in zip(shape, pads, strict=True):
                if max(a, b) > n - 1:
                    raise ValueError(f"Padding: reflect pad {(a, b)} exceeds size {n} - 1")
        out = tuple(n + a + b for n, (a, b) in zip(shape, pads, strict=True))
        if self.type == 0 and self.per_channel_pad_data_size and len(shape) >= 3:
            if self.per_channel_pad_data_size < out[0]:
                raise ValueError(
                    f"Padding: param 6 per_channel_pad_data_size={self.per_channel_pad_data_size}"
                    f" is less than the {out[0]} padded channels"
                )
        return [out]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = _f32(inputs[0])
        self.output_shapes([x.shape])
        pads = self._pads(x.ndim)
        if self.type == 1:
            return [np.pad(x, pads, mode="edge")]
        if self.type == 2:
            return [np.pad(x, pads, mode="reflect")]
        if not self.per_channel_pad_data_size or x.ndim < 3:
            return [np.pad(x, pads, mode="constant", constant_values=_F32(self.value))]
        # per-channel constant: indexed by the output channel (3-D) or the channel (4-D)
        out = np.pad(x, pads, mode="constant")
        nq = out.shape[0]
        if self.per_channel_pad_data.size < nq:
            raise ValueError(f"Padding: {self.per_channel_pad_data.size} pad values < {nq}")
        mask = np.ones(out.shape, dtype=bool)
        mask[tuple(slice(a, a + n) for n, (a, _) in zip(x.shape, pads, strict=True))] = False
        fill = self.per_channel_pad_data[:nq].reshape((nq,) + (1,) * (x.ndim - 1))
        out = np.where(mask, np.broadcast_to(fill, out.shape), out).astype(_F32)
        return [out]


@register_layer("Reshape")
class Reshape(ShareInputOnGpu):
    """Reinterpret the data with a new shape: w (0), h (1), d (11), c (2); 0 copies the input
    dim, -1 infers it, -233 drops it (and every dim after it in c, d, h order)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = self.h = self.d = self.c = -233
        self.ndim = 0

    def load_param(self, pd: ParamDict) -> None:
        self.w = pd.get_int(0, -233)
        self.h = pd.get_int(1, -233)
        self.d = pd.get_int(11, -233)
        self.c = pd.get_int(2, -233)
        if pd.get_str(6, ""):
            raise ValueError("Reshape: param 6 shape_expr unsupported")
        if pd.get_int(12, 233) != 233 or pd.get_int(13, 233) != 233:
            raise ValueError("Reshape: params 12/13 (batch axis) unsupported")
        self.ndim = 4
        if self.d == -233:
            self.ndim = 3
        if self.c == -233:
            self.ndim = 2
        if self.h == -233:
            self.ndim = 1
        if self.w == -233:
            raise ValueError("Reshape: param 0 w must be given")
        dims = [(0, "w", self.w), (1, "h", self.h), (11, "d", self.d), (2, "c", self.c)]
        check_params(self.type_name, MAX_EXTENT, *dims)
        for key, name, value in dims:
            if value < -1 and value != -233:
                raise ValueError(
                    f"Reshape: param {key} ({name}) = {value}: a size is > 0, 0 (keep), "
                    "-1 (infer) or -233 (absent)"
                )
        if sum(1 for _, _, value in dims if value == -1) > 1:
            raise ValueError("Reshape: params 0/1/11/2: only one size can be -1 (inferred)")

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        bw, bh, bd, bc = mat_whdc(shape)
        total = bw * bh * bd * bc
        w, h, d, c = self.w, self.h, self.d, self.c
        w = bw if w == 0 else w
        h = bh if h == 0 else h
        d = bd if d == 0 else d
        c = bc if c == 0 else c
        if self.ndim == 1:
            w = total if w == -1 else w
            out: Shape = (w,)
        elif self.ndim == 2:
            if w == -1:
                w = total // h
            if h == -1:
                h = total // w
            out = (h, w)
        elif self.ndim == 3:
            if w == -1:
                w = total // c // h
            if h == -1:
                h = total // c // w
            if c == -1:
                c = total // h // w
            out = (c, h, w)
        else:
            if w == -1:
                w = total // c // d // h
            if h == -1:
                h = total // c // d // w
            if d == -1:
                d = total // c // h // w
            if c == -1:
                c = total // d // h // w
            out = (c, d, h, w)
        if min(out) <= 0 or int(np.prod(out)) != total:
            raise ValueError(f"Reshape: cannot reshape {shape} to {out}")
        return [out]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = _f32(inputs[0])
        (out,) = self.output_shapes([x.shape])
        return [x.reshape(out).copy()]


@register_layer("Flatten")
class Flatten(ShareInputOnGpu):
    """All data as one 1-D blob, in c, d, h, w order."""

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        return [(int(np.prod(input_shapes[0])),)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [_f32(inputs[0]).reshape(-1).copy()]


# ncnn's order strings name the output's (w, h[, d], c) by input axis; see permute.cpp.
_PERMUTE_ORDERS: dict[int, tuple[str, ...]] = {
    2: ("wh", "hw"),
    3: ("whc", "hwc", "wch", "cwh", "hcw", "chw"),
    4: (
        "whdc", "hwdc", "wdhc", "dwhc", "hdwc", "dhwc",
        "whcd", "hwcd", "wchd", "cwhd", "hcwd", "chwd",
        "wdch", "dwch", "wcdh", "cwdh", "dcwh", "cdwh",
        "hdcw", "dhcw", "hcdw", "chdw", "dchw", "cdhw",
    ),
}  # fmt: skip


def permute_axes(dims: int, order_type: int) -> tuple[int, ...]:
    """The numpy transpose for ncnn's Permute ``order_type`` on a ``dims``-D blob."""
    if dims == 1:
        return (0,)
    orders = _PERMUTE_ORDERS[dims]
    if not 0 <= order_type < len(orders):
        raise ValueError(f"Permute: param 0 order_type={order_type} invalid for {dims}-D")
    numpy_axis = {2: "hw", 3: "chw", 4: "cdhw"}[dims]
    # the string lists the output's w first; numpy order is the reverse
    return tuple(numpy_axis.index(ch) for ch in reversed(orders[order_type]))


@register_layer("Permute")
class Permute(Layer):
    """Transpose by ncnn's ``order_type`` (0): 2 orders for 2-D, 6 for 3-D, 24 for 4-D."""

    def __init__(self) -> None:
        super().__init__()
        self.order_type = 0

    def load_param(self, pd: ParamDict) -> None:
        self.order_type = pd.get_int(0, 0)
        if not 0 <= self.order_type < 24:
            raise ValueError(f"Permute: param 0 order_type={self.order_type} unsupported")

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        axes = permute_axes(len(shape), self.order_type)
        return [tuple(shape[a] for a in axes)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = _f32(inputs[0])
        axes = permute_axes(x.ndim, self.order_type)
        return [np.ascontiguousarray(x.transpose(axes))]


@register_layer("ShuffleChannel")
class ShuffleChannel(Layer):
    """Channel shuffle in ``group`` (0) groups; ``reverse`` (1) undoes it."""

    def __init__(self) -> None:
        super().__init__()
        self.group = 1
        self.reverse = 0

    def load_param(self, pd: ParamDict) -> None:
        self.group = pd.get_int(0, 1)
        self.reverse = pd.get_int(1, 0)
        check_params(self.type_name, MAX_CHANNELS, (0, "group", self.group))
        if self.group <= 0:
            raise ValueError(f"ShuffleChannel: param 0 group={self.group} invalid")

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        c = mat_whdc(shape)[3]
        if c % self.group:
            raise ValueError(f"ShuffleChannel: {c} channels not divisible by {self.group}")
        return [shape]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = _f32(inputs[0])
        self.output_shapes([x.shape])
        if x.ndim < 3:
            return [x.copy()]
        c = x.shape[0]
        g = c // self.group if self.reverse else self.group
        # out channel g*j + i <- in channel (c/g)*i + j
        y = x.reshape((g, c // g, *x.shape[1:])).swapaxes(0, 1)
        return [np.ascontiguousarray(y).reshape(x.shape)]


@register_layer("PixelShuffle")
class PixelShuffle(Layer):
    """Depth-to-space by ``upscale_factor`` (0); ``mode`` (1) 0 is PyTorch's channel order
    (c, r, r), 1 is (r, r, c)."""

    def __init__(self) -> None:
        super().__init__()
        self.upscale_factor = 1
        self.mode = 0

    def load_param(self, pd: ParamDict) -> None:
        self.upscale_factor = pd.get_int(0, 1)
        self.mode = pd.get_int(1, 0)
        check_params(self.type_name, MAX_STRIDE, (0, "upscale_factor", self.upscale_factor))
        if self.upscale_factor <= 0:
            raise ValueError(f"PixelShuffle: param 0 upscale_factor={self.upscale_factor}")
        if self.mode not in (0, 1):
            raise ValueError(f"PixelShuffle: param 1 mode={self.mode} unsupported")

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        r = self.upscale_factor
        if len(shape) != 3 or shape[0] % (r * r):
            raise ValueError(f"PixelShuffle: input {shape} needs 3-D with c divisible by r*r")
        c, h, w = shape
        return [(c // (r * r), h * r, w * r)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = _f32(inputs[0])
        ((outc, outh, outw),) = self.output_shapes([x.shape])
        r = self.upscale_factor
        _, h, w = x.shape
        if self.mode == 0:
            y = x.reshape(outc, r, r, h, w).transpose(0, 3, 1, 4, 2)
        else:
            y = x.reshape(r, r, outc, h, w).transpose(2, 3, 0, 4, 1)
        return [np.ascontiguousarray(y).reshape(outc, outh, outw)]
