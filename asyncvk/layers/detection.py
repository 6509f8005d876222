"""SSD post-processing: PriorBox (anchor boxes) and DetectionOutput (decode, sort, NMS).

Both mirror ncnn's src/layer/priorbox.cpp and detectionoutput.cpp operation for operation in
float32 (the order of every product and sum is ncnn's, so boxes agree to the bit where the math
library does), and both run on the CPU: PriorBox depends only on its inputs' shapes, and ncnn
has no Vulkan DetectionOutput. Where ncnn reads memory it never wrote (params that do not fit
together, blobs too small for the priors), asyncvk refuses the model or the input instead.
DetectionOutput's per-class sort and NMS are ncnn's loops in C (``_detect.c``).
"""

from __future__ import annotations

import math

import numpy as np

from ._base import BlobCount, Layer, Shape
from ._detect_ext import ssd_rows
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    groups_1d,
    local_size_1d,
    pack_push,
)
from ._nms import qsort_descent_order
from ._registry import register_layer
from ._schema import Param, floats

_F32 = np.float32
_UNSET = -233  # ncnn's "not given" marker for sizes and steps
_MXNET = -233  # DetectionOutput num_class that selects the mxnet-ssd layout
_ROW = 6  # label, score, xmin, ymin, xmax, ymax


def _width_height(shape: Shape) -> tuple[int, int]:
    """ncnn's Mat w and h of a blob of this numpy shape (h is 1 for a 1-D blob)."""
    return shape[-1], (shape[-2] if len(shape) >= 2 else 1)


def _centers(start: np.float32, step: np.float32, count: int) -> np.ndarray:
    """``start``, ``start + step``, ... summed one step at a time in float32, as ncnn's loop
    does (``center_x += step_w``), not as ``start + j * step``."""
    steps = np.full(count, step, dtype=_F32)
    steps[0] = start
    return np.cumsum(steps, dtype=_F32)


@register_layer("PriorBox")
class PriorBox(Layer):
    """SSD anchor boxes for every position of a feature map (input 0), normalized by the image
    size (params 9/10, or input 1's w/h when they are -233).

    caffe style: a 2-D blob (2, 4 * positions * priors): row 0 the boxes, row 1 the variances.
    With one input, image size -233 and no max_sizes it is mxnet's MultiBoxPrior instead: a 1-D
    blob of boxes, ``min_sizes`` at ratio 1 then ``aspect_ratios[1:]`` at ``min_sizes[0]``.
    """

    min_sizes = Param(0, floats)
    max_sizes = Param(1, floats)
    aspect_ratios = Param(2, floats)
    variance_x = Param(3, float, 0.1)
    variance_y = Param(4, float, 0.1)
    variance_w = Param(5, float, 0.2)
    variance_h = Param(6, float, 0.2)
    flip = Param(7, int, 1)
    clip = Param(8, int, 0)
    image_width = Param(9, int, 0)
    image_height = Param(10, int, 0)
    step_width = Param(11, float, float(_UNSET))
    step_height = Param(12, float, float(_UNSET))
    offset = Param(13, float, 0.0)
    step_mmdetection = Param(14, int, 0)
    center_mmdetection = Param(15, int, 0)

    one_blob_only = False

    def validate(self) -> None:
        # ncnn leaves the boxes unwritten without min_sizes, and reads max_sizes[k] for each
        # min size (or never writes the extra max boxes it counted)
        if not self.min_sizes:
            raise ValueError("PriorBox param 0 (min_sizes) is empty; it needs at least one size")
        if self.max_sizes and len(self.max_sizes) != len(self.min_sizes):
            raise ValueError(
                f"PriorBox param 1 (max_sizes) has {len(self.max_sizes)} values; it must be "
                f"empty or have one per min size ({len(self.min_sizes)})"
            )

    def _mxnet_capable(self) -> bool:
        return self.image_width == _UNSET and self.image_height == _UNSET and not self.max_sizes

    def _is_mxnet(self, bottoms: int) -> bool:
        return bottoms == 1 and self._mxnet_capable()

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        needs_image = _UNSET in (self.image_width, self.image_height)
        if needs_image and not self._mxnet_capable():
            return (2, 2), (1, 1)  # the image size comes from input 1
        return (1, 2), (1, 1)

    def check_blob_counts(self, bottoms: int, tops: int) -> None:
        super().check_blob_counts(bottoms, tops)
        # mxnet style writes one box per min size but counts num_sizes - 1 + num_ratios
        if self._is_mxnet(bottoms) and not self.aspect_ratios:
            raise ValueError(
                "PriorBox mxnet style (one input, image size -233, no max_sizes) needs param 2 "
                "(aspect_ratios) to start with ratio 1; it is empty"
            )

    def _prior_count(self, bottoms: int) -> int:
        if self._is_mxnet(bottoms):
            return len(self.min_sizes) - 1 + len(self.aspect_ratios)
        count = len(self.min_sizes) * (1 + len(self.aspect_ratios)) + len(self.max_sizes)
        if self.flip:
            count += len(self.min_sizes) * len(self.aspect_ratios)
        return count

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        w, h = _width_height(input_shapes[0])
        values = 4 * w * h * self._prior_count(len(input_shapes))
        if self._is_mxnet(len(input_shapes)):
            return [(values,)]
        return [(2, values)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [self._boxes([tuple(x.shape) for x in inputs])]

    def _boxes(self, shapes: list[Shape]) -> np.ndarray:
        if self._is_mxnet(len(shapes)):
            return self._mxnet_boxes(shapes[0])
        return self._caffe_boxes(shapes)

    # -- GPU: the boxes depend on shapes only, so each plan computes them once on the host
    # (bit-equal to the CPU path) and one dispatch writes them into the output blob; the
    # feature maps never leave the device.

    gpu = True

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        return {"copy": PipelineSpec("copy_f32", (), local_size_1d(target.info))}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        boxes = self._boxes([blob.shape for blob in inputs]).reshape(-1)
        table = ctx.constant(np.ascontiguousarray(boxes, dtype=_F32))
        local = local_size_1d(ctx.info)
        groups = groups_1d(boxes.size, local, ctx.info)
        ctx.dispatch("copy", [table, outputs[0]], pack_push("i", boxes.size), groups)

    def _step(self, step: float, image: int, extent: int) -> np.float32:
        if step != _UNSET:
            return _F32(step)
        value = _F32(image) / _F32(extent)
        return np.ceil(value) if self.step_mmdetection else value

    def _caffe_boxes(self, shapes: list[Shape]) -> np.ndarray:
        w, h = _width_height(shapes[0])
        image_w, image_h = self.image_width, self.image_height
        if _UNSET in (image_w, image_h):
            given_w, given_h = _width_height(shapes[1])
            image_w = given_w if image_w == _UNSET else image_w
            image_h = given_h if image_h == _UNSET else image_h
        step_w = self._step(self.step_width, image_w, w)
        step_h = self._step(self.step_height, image_h, h)
        offset = _F32(self.offset)
        rows = np.arange(h, dtype=_F32)
        if self.center_mmdetection:
            cx = _centers(offset * (step_w - _F32(1)), step_w, w)
            cy = offset * (step_h - _F32(1)) + rows * step_h
        else:  # -ffast-math factors ncnn's offset * step_h + i * step_h
            cx = _centers(offset * step_w, step_w, w)
            cy = (rows + offset) * step_h
        sizes = np.array(self._caffe_box_sizes(), dtype=_F32).reshape(-1, 2)
        half = sizes * _F32(0.5)
        half_w, half_h = half[:, 0], half[:, 1]
        x = cx[None, :, None]
        y = cy[:, None, None]
        # ncnn is built with -ffast-math: its divisions by the image size are products with
        # the reciprocal (which rounds differently in the last bit)
        iw, ih = _F32(1) / _F32(image_w), _F32(1) / _F32(image_h)
        corners = [(x - half_w) * iw, (y - half_h) * ih, (x + half_w) * iw, (y + half_h) * ih]
        grid = (h, w, len(sizes))
        boxes = np.stack([np.broadcast_to(c, grid) for c in corners], axis=-1).reshape(-1)
        if self.clip:
            boxes = np.clip(boxes, _F32(0), _F32(1))
        variances = [self.variance_x, self.variance_y, self.variance_w, self.variance_h]
        variance_row = np.tile(np.array(variances, dtype=_F32), boxes.size // 4)
        return np.stack([boxes, variance_row]).astype(_F32)

    def _caffe_box_sizes(self) -> list[tuple[np.float32, np.float32]]:
        """(box_w, box_h) of each prior at one position, in ncnn's order."""
        sizes = []
        for k, min_size in enumerate(_F32(s) for s in self.min_sizes):
            sizes.append((min_size, min_size))
            if self.max_sizes:
                side = np.sqrt(min_size * _F32(self.max_sizes[k]))
                sizes.append((side, side))
            for ratio in (_F32(r) for r in self.aspect_ratios):
                box_w, box_h = min_size * np.sqrt(ratio), min_size / np.sqrt(ratio)
                sizes.append((box_w, box_h))
                if self.flip:
                    sizes.append((box_h, box_w))
        return sizes

    def _mxnet_boxes(self, shape: Shape) -> np.ndarray:
        w, h = _width_height(shape)
        fw, fh = _F32(w), _F32(h)
        step_w = _F32(self.step_width) if self.step_width != _UNSET else _F32(1) / fw
        step_h = _F32(self.step_height) if self.step_height != _UNSET else _F32(1) / fh
        offset = _F32(self.offset)
        cx = _centers(offset * step_w, step_w, w)
        cy = (np.arange(h, dtype=_F32) + offset) * step_h  # -ffast-math factors ncnn's sum
        half, aspect = _F32(0.5), fh * (_F32(1) / fw)  # and divides by w with a reciprocal
        halves = [(s * aspect * half, s * half) for s in (_F32(v) for v in self.min_sizes)]
        first = _F32(self.min_sizes[0])
        for ratio in (np.sqrt(_F32(r)) for r in self.aspect_ratios[1:]):
            halves.append((first * aspect * ratio * half, first / ratio * half))
        size = np.array(halves, dtype=_F32).reshape(-1, 2)
        x = cx[None, :, None]
        y = cy[:, None, None]
        corners = [x - size[:, 0], y - size[:, 1], x + size[:, 0], y + size[:, 1]]
        grid = (h, w, len(size))
        boxes = np.stack([np.broadcast_to(c, grid) for c in corners], axis=-1).reshape(-1)
        if self.clip:
            boxes = np.clip(boxes, _F32(0), _F32(1))
        return boxes.astype(_F32)


def _flat(x: np.ndarray, what: str) -> np.ndarray:
    """The values ncnn's ``Mat::operator[]`` walks: the blob's data in order. A 3-D or 4-D blob
    with several channels has per-channel padding in ncnn unless a channel is a multiple of
    four floats; asyncvk refuses those rather than guess at the padding."""
    if len(x.shape) >= 3 and x.shape[0] > 1 and math.prod(x.shape[1:]) % 4:
        raise ValueError(
            f"DetectionOutput: {what} of shape {tuple(x.shape)} has channels ncnn pads; "
            "flatten it first"
        )
    return np.asarray(x, dtype=_F32).reshape(-1)


@register_layer("DetectionOutput")
class DetectionOutput(Layer):
    """SSD detections from box offsets (input 0), class scores (input 1) and priors (input 2):
    decode each prior with its variances, keep per class the scores over
    ``confidence_threshold``, sort, cut to ``nms_top_k``, NMS, then sort all classes together
    and cut to ``keep_top_k``.

    The output is a (count, 6) blob of rows [label, score, xmin, ymin, xmax, ymax]; count
    depends on the data and may be 0 (ncnn then leaves its output an empty Mat; asyncvk gives
    shape (0,), as for the YOLO layers). caffe-ssd layout: scores (num_prior, num_class),
    priors (2, 4 * num_prior) with the variances in row 1. ``num_class`` -233 is mxnet-ssd:
    scores (num_class, num_prior), priors (num_prior, 4), the variances from params 5-8.
    """

    num_class = Param(0, int, 0)
    nms_threshold = Param(1, float, 0.05)
    nms_top_k = Param(2, int, 300)
    keep_top_k = Param(3, int, 100)
    confidence_threshold = Param(4, float, 0.5)
    variance_x = Param(5, float, 0.1)
    variance_y = Param(6, float, 0.1)
    variance_w = Param(7, float, 0.2)
    variance_h = Param(8, float, 0.2)

    one_blob_only = False

    def validate(self) -> None:
        if self.num_class != _MXNET and self.num_class < 1:
            raise ValueError(
                f"DetectionOutput param 0 (num_class) = {self.num_class} must be >= 1 "
                "(background included) or -233 (mxnet-ssd)"
            )
        for pid, name, value in (
            (2, "nms_top_k", self.nms_top_k),
            (3, "keep_top_k", self.keep_top_k),
        ):
            if value < 0:
                raise ValueError(f"DetectionOutput param {pid} ({name}) = {value} must be >= 0")

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (3, 3), (1, 1)

    def _layout(self, shapes: list[Shape]) -> tuple[int, int]:
        """(num_prior, num_class) for inputs of these shapes; ValueError when ncnn would read
        past one of them."""
        loc, conf, prior = shapes
        if self.num_class == _MXNET:
            num_prior = _width_height(prior)[1]
            num_class = _width_height(conf)[1]
            if math.prod(prior) < 4 * num_prior:
                raise ValueError(f"DetectionOutput: priors {prior} need 4 values per row (w >= 4)")
        else:
            if len(prior) < 2 or prior[-2] < 2:
                raise ValueError(
                    f"DetectionOutput: priors {prior} need 2 rows (boxes, variances), as "
                    "PriorBox gives"
                )
            num_prior, num_class = prior[-1] // 4, self.num_class
        if math.prod(loc) < 4 * num_prior:
            raise ValueError(f"DetectionOutput: box offsets {loc} hold fewer than 4 x {num_prior}")
        if math.prod(conf) < num_class * num_prior:
            raise ValueError(
                f"DetectionOutput: scores {conf} hold fewer than {num_class} classes x "
                f"{num_prior} priors"
            )
        return num_prior, num_class

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        """An upper bound: the real count depends on the scores (``forward`` gives it). At
        least one row, as planned blobs are never empty."""
        num_prior, num_class = self._layout(input_shapes)
        most = min(self.keep_top_k, max(num_class - 1, 0) * min(self.nms_top_k, num_prior))
        return [(max(most, 1), _ROW)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        num_prior, num_class = self._layout([tuple(x.shape) for x in inputs])
        boxes = self._decode(inputs, num_prior)
        conf = _flat(inputs[1], "scores")[: num_prior * num_class]
        mxnet = self.num_class == _MXNET
        shape = (num_class, num_prior) if mxnet else (num_prior, num_class)
        out = ssd_rows(
            conf.reshape(shape),
            mxnet,
            boxes,
            self.confidence_threshold,
            self.nms_top_k,
            self.nms_threshold,
        )
        order = qsort_descent_order(out[:, 1], self.keep_top_k)
        if not order.size:  # ncnn returns before creating its output: an empty Mat, as YOLO's do
            return [np.zeros((0,), _F32)]
        return [np.ascontiguousarray(out[order])]

    def _decode(self, inputs: list[np.ndarray], num_prior: int) -> np.ndarray:
        """Every prior's box from its offsets (ncnn skips priors whose background score is
        over 1 - confidence_threshold; no class can pass those when scores are a softmax)."""
        loc = _flat(inputs[0], "box offsets")[: 4 * num_prior].reshape(num_prior, 4)
        prior_blob = np.asarray(inputs[2], dtype=_F32)
        flat = prior_blob.reshape(-1)
        priors = flat[: 4 * num_prior].reshape(num_prior, 4)
        if self.num_class == _MXNET:
            var = np.array(
                [self.variance_x, self.variance_y, self.variance_w, self.variance_h], _F32
            )[None, :]
        else:
            row = prior_blob.shape[-1]
            var = flat[row : row + 4 * num_prior].reshape(num_prior, 4)
        half = _F32(0.5)
        pb_w = priors[:, 2] - priors[:, 0]
        pb_h = priors[:, 3] - priors[:, 1]
        pb_cx = (priors[:, 0] + priors[:, 2]) * half
        pb_cy = (priors[:, 1] + priors[:, 3]) * half
        cx = var[:, 0] * loc[:, 0] * pb_w + pb_cx
        cy = var[:, 1] * loc[:, 1] * pb_h + pb_cy
        # expf rounded once: float64 exp then float32 is what a correctly rounded expf gives
        bw = np.exp((var[:, 2] * loc[:, 2]).astype(np.float64)).astype(_F32) * pb_w
        bh = np.exp((var[:, 3] * loc[:, 3]).astype(np.float64)).astype(_F32) * pb_h
        return np.stack([cx - bw * half, cy - bh * half, cx + bw * half, cy + bh * half], axis=1)
