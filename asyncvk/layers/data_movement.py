"""Layers that move data without arithmetic: Split, Concat, Slice, Permute, ShuffleChannel,
PixelShuffle (Crop and Padding are in ``borders``, Reshape and Flatten in ``reshape``).

Each mirrors the ncnn layer of the same name (src/layer/*.cpp), including its parameter
defaults. On the GPU, the copies run ``gather.comp`` over an index map computed once per plan
by running the layer's own numpy reference on index arrays (:class:`GatherOnGpu`), so the GPU
path has exactly the reference's semantics for every parameter form. On a GPU, Concat copies up
to eight inputs in one ``concat.comp`` dispatch (a 950-layer RRDB has 240 Concats: one dispatch
each instead of one per input), and falls back to ``scatter.comp`` with slabs of the output's
index grid beyond that. On a CPU device it records buffer copies (memcpy on lavapipe).
"""

from __future__ import annotations

import math

import numpy as np

from ..gpu._info import GpuInfo
from ..gpu._memory import Buffer
from ._base import BlobCount, Layer, ShareInputOnGpu
from ._gather import GatherOnGpu
from ._geometry import shape4
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    Shape,
    groups_1d,
    local_size_1d,
    pack_push,
)
from ._limits import MAX_CHANNELS, MAX_STRIDE
from ._registry import register_layer
from ._schema import Param, ints

_F32 = np.float32
_CONCAT_MAX = 8  # input bindings of concat.comp
# Concat by buffer copies: where the device's choices say (concat_copies: "cpu" devices)
#: the most copies one Concat records (rows x inputs); past them, one dispatch
MOST_COPIES = 64


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=_F32)


def positive_axis(axis: int, dims: int, what: str) -> int:
    """Resolve a negative axis as ncnn does and check it is in range."""
    pos = axis + dims if axis < 0 else axis
    if not 0 <= pos < dims:
        raise ValueError(f"{what}: axis {axis} out of range for a {dims}-D blob")
    return pos


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

    axis = Param(0, int, 0)

    one_blob_only = False
    gpu = True

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (1, None), (1, 1)

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shapes = [tuple(s) for s in input_shapes]
        dims = len(shapes[0])
        axis = positive_axis(self.axis, dims, "Concat")
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
        axis = positive_axis(self.axis, inputs[0].ndim, "Concat")
        return [np.concatenate([_f32(x) for x in inputs], axis=axis)]

    # -- GPU -------------------------------------------------------------------------------

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        local = local_size_1d(target.info)
        if len(self.bottoms) <= _CONCAT_MAX:
            return {"concat": PipelineSpec("concat", (), local)}
        return {"scatter": PipelineSpec("scatter", (), local)}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        out_shape = outputs[0].shape
        axis = self.axis % len(out_shape)
        # rows = everything before the axis; each input owns a run of columns in every row
        rows = math.prod(out_shape[:axis])
        inner = math.prod(out_shape[axis + 1 :])
        if copies_chosen(ctx.info, rows * len(inputs)):
            _copy_runs(ctx, inputs, outputs[0], axis, rows, inner)
            return
        if len(inputs) > _CONCAT_MAX:
            _scatter_slabs(ctx, inputs, outputs[0], axis)
            return
        cols = [0]
        for blob in inputs:
            cols.append(cols[-1] + blob.shape[axis] * inner)
        cols += [cols[-1]] * (_CONCAT_MAX + 1 - len(cols))
        bufs: list[Buffer | GpuBlob] = [*inputs]
        bufs += [inputs[0]] * (_CONCAT_MAX - len(inputs)) + [outputs[0]]
        push = pack_push("12i", rows, cols[len(inputs)], len(inputs), *cols)
        groups = groups_1d(outputs[0].size, local_size_1d(ctx.info), ctx.info)
        ctx.dispatch("concat", bufs, push, groups)


def copies_chosen(info: GpuInfo, runs: int) -> bool:
    """Whether a Concat of ``runs`` contiguous runs records buffer copies instead of a dispatch.

    lavapipe runs a copy as a memcpy: rrdb's 240 channel Concats (24-48k values each) took
    0.33-0.74 ms each as ``concat.comp`` dispatches (per-lane loads, an integer division and
    an 8-way branch per value), 145 of 633 ms. A GPU keeps the one dispatch."""
    return runs <= MOST_COPIES and info.takes(info.choices.concat_copies)


def _copy_runs(
    ctx: RecordContext, inputs: list[GpuBlob], out: GpuBlob, axis: int, rows: int, inner: int
) -> None:
    """Each input's run of every row, copied to its place in the output's row."""
    row_len = out.shape[axis] * inner
    col = 0
    for blob in inputs:
        width = blob.shape[axis] * inner
        for row in range(rows if width else 0):  # a copy of nothing is invalid Vulkan
            ctx.copy(blob, row * width, out, row * row_len + col, width)
        col += width


def _scatter_slabs(ctx: RecordContext, inputs: list[GpuBlob], out: GpuBlob, axis: int) -> None:
    """More inputs than bindings: each input fills one slab of the output along the axis; its
    destination indices are that slab of the output's index grid."""
    grid = np.arange(out.size, dtype=np.int32).reshape(out.shape)
    offset = 0
    for blob in inputs:
        extent = blob.shape[axis]
        slab = [slice(None)] * len(out.shape)
        slab[axis] = slice(offset, offset + extent)
        dst = np.ascontiguousarray(grid[tuple(slab)]).reshape(-1)
        groups = groups_1d(blob.size, local_size_1d(ctx.info), ctx.info)
        ctx.dispatch("scatter", [blob, out, ctx.constant(dst)], pack_push("i", blob.size), groups)
        offset += extent


@register_layer("Slice")
class Slice(GatherOnGpu):
    """Cut one input along ``axis`` (1) by ``slices`` (0; -233 = even share of the rest) or by
    split ``indices`` (2)."""

    slices = Param(0, ints)
    axis = Param(1, int, 0)
    indices = Param(2, ints)

    one_blob_only = False

    def validate(self) -> None:
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

    def _size(self, i: int, count: int, n: int, q: int) -> int:
        """Slice ``i``'s extent, ``q`` elements of ``n`` being taken by the slices before."""
        if not self.indices:
            size = self.slices[i]
            return (n - q) // (count - i) if size == -233 else size
        if i == count - 1:
            return n - q
        idx = self.indices[i]
        return (n + idx if idx < 0 else idx) - q

    def _sizes(self, shape: Shape) -> tuple[int, list[int]]:
        axis = positive_axis(self.axis, len(shape), "Slice")
        n = shape[axis]
        count = self._count()
        sizes: list[int] = []
        q = 0
        for i in range(count):
            size = self._size(i, count, n, q)
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
class Permute(GatherOnGpu):
    """Transpose by ncnn's ``order_type`` (0): 2 orders for 2-D, 6 for 3-D, 24 for 4-D."""

    order_type = Param(0, int, 0)

    def validate(self) -> None:
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
class ShuffleChannel(GatherOnGpu):
    """Channel shuffle in ``group`` (0) groups; ``reverse`` (1) undoes it."""

    group = Param(0, int, 1, limit=MAX_CHANNELS)
    reverse = Param(1, int, 0)

    def validate(self) -> None:
        if self.group <= 0:
            raise ValueError(f"ShuffleChannel: param 0 group={self.group} invalid")

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        c = shape4(shape)[3]
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
class PixelShuffle(GatherOnGpu):
    """Depth-to-space by ``upscale_factor`` (0); ``mode`` (1) 0 is PyTorch's channel order
    (c, r, r), 1 is (r, r, c)."""

    upscale_factor = Param(0, int, 1, limit=MAX_STRIDE)
    mode = Param(1, int, 0)

    def validate(self) -> None:
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
