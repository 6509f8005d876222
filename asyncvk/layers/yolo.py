"""YOLO post-processing: YoloDetectionOutput (v2) and Yolov3DetectionOutput (decode, sort, NMS).

Both take one or more (c, h, w) feature maps of ``num_box`` groups of channels each: x, y, w, h,
objectness, then ``num_class`` class logits. Each cell whose confidence reaches the threshold
becomes a box; boxes of all maps are sorted by confidence the way ncnn's unstable quicksort does,
suppressed greedily across classes, and written as rows ``[label + 1, score, xmin, ymin, xmax,
ymax]`` in coordinates relative to the image (0..1).

The number of rows depends on the data, so ``output_shapes`` gives an upper bound (every cell a
box, none suppressed) and ``forward`` the real shape. When no box survives, ncnn leaves the
output as it is: Yolov3DetectionOutput gives an empty Mat (asyncvk: an array of shape (0,),
as tests/ncnn_oracle.py reads ncnn's empty Mat; the wheel crashes converting it), and
YoloDetectionOutput, which works in place, gives its first input with the class logits of each
box replaced by their softmax. CPU-only layers, like ncnn's own (no Vulkan path there either).

The decode, sort and NMS are ncnn's loops in C (``_detect.c``): every float follows the float32
arithmetic of ncnn's x86 build (its divisions by a grid size are multiplications by a hoisted
reciprocal) with the C library's ``expf``, so thresholds and ties fall the same way:
Yolov3DetectionOutput matches ncnn bit for bit. YoloDetectionOutput is within an ulp or two:
ncnn's Softmax uses SIMD exp and reciprocal approximations, and its decode loop a vectorized
expf.
"""

from __future__ import annotations

import struct

import numpy as np

from ._base import BlobCount, Layer, Shape
from ._detect_ext import yolo_decode
from ._limits import MAX_CHANNELS
from ._nms import IouRule, nms_sorted, qsort_descent_order
from ._paramdict import ParamDict
from ._registry import register_layer
from ._schema import Param, floats, read_params

_F32 = np.float32
_ONE = _F32(1)


def _bits_as_float(v: int) -> float:
    return float(struct.unpack("<f", struct.pack("<i", v))[0])


def _float_bits_as_int(v: float) -> int:
    return int(struct.unpack("<i", struct.pack("<f", v))[0])


def _array(pd: ParamDict, param_id: int) -> tuple[int | float, ...]:
    value = pd.get(param_id, ())
    if not isinstance(value, tuple):
        raise ValueError(f"param {param_id} must be an array (-{23300 + param_id}=n,...)")
    for v in value:
        if isinstance(v, int) and not -(2**31) <= v < 2**31:
            raise ValueError(f"param {param_id}: element {v} is not a 32-bit value")
    return value


def ncnn_float_array(pd: ParamDict, param_id: int) -> tuple[float, ...]:
    """A float array param (biases, anchors_scale) as ncnn reads it.

    ncnn stores each element of an array as 32 bits: a float where the text has '.' or 'e',
    else an int. The array is an int array when its last element is an int, and then ncnn
    converts every element to float by value (a float element's bits taken as an int);
    otherwise it reads the bits as floats (an int element becomes the float of those bits).
    """
    value = _array(pd, param_id)
    if value and isinstance(value[-1], int):
        return tuple(float(_F32(v if isinstance(v, int) else _float_bits_as_int(v))) for v in value)
    return tuple(_bits_as_float(v) if isinstance(v, int) else float(_F32(v)) for v in value)


def ncnn_mask_array(pd: ParamDict, param_id: int) -> tuple[float, ...]:
    """Yolov3DetectionOutput's mask as ncnn reads it: each element's own 32 bits as a float,
    so an int is a float's bits (converters write 3.0 as 1077936128) whatever the others are."""
    return tuple(
        _bits_as_float(v) if isinstance(v, int) else float(_F32(v)) for v in _array(pd, param_id)
    )


class _Candidates:
    """Boxes that passed the confidence threshold, in ncnn's gathering order."""

    def __init__(self) -> None:
        self.parts: list[np.ndarray] = []

    def add(self, rows: np.ndarray) -> None:
        """One map's (n, 7) rows ``[score, xmin, ymin, xmax, ymax, area, label]``."""
        self.parts.append(rows)

    def detections(self, nms_threshold: float, rule: IouRule) -> np.ndarray:
        """Sort, suppress, and give the (n, 6) rows ``[label + 1, score, x0, y0, x1, y1]``."""
        table = np.concatenate(self.parts) if self.parts else np.zeros((0, 7), np.float32)
        if len(table) == 0:  # nothing passed: no sort, no NMS (each a C call and its arrays)
            return np.zeros((0, 6), dtype=np.float32)
        table = table[qsort_descent_order(table[:, 0])]
        table = table[nms_sorted(table[:, 1:5], table[:, 5], nms_threshold, rule)]
        rows = np.empty((len(table), 6), dtype=np.float32)
        rows[:, 0] = table[:, 6] + _ONE
        rows[:, 1:6] = table[:, 0:5]
        return rows


class _YoloOutput(Layer):
    """Params and checks shared by both versions (ncnn's ids and defaults)."""

    one_blob_only = False
    #: Yolov3DetectionOutput's decode (sigmoid classes) rather than the v2 one (softmax)
    v3_decode = False
    num_class = Param(0, int, 20, limit=MAX_CHANNELS)
    num_box = Param(1, int, 5, limit=MAX_CHANNELS)
    confidence_threshold = Param(2, float, 0.01)
    nms_threshold = Param(3, float, 0.45)
    biases = Param(4, floats)

    def load_param(self, pd: ParamDict) -> None:
        read_params(self, self.params, pd)
        self._read_arrays(pd)
        self.validate()

    def _read_arrays(self, pd: ParamDict) -> None:
        """The array params with ncnn's reading of ints in them (see ncnn_float_array)."""
        self.__dict__["biases"] = ncnn_float_array(pd, 4)

    def validate(self) -> None:
        """What ncnn's load_param refuses: no box, no class (it needs a score to rank)."""
        if self.num_box < 1:
            raise ValueError(f"param 1 (num_box) = {self.num_box} must be at least 1")
        if self.num_class < 1:
            raise ValueError(f"param 0 (num_class) = {self.num_class} must be at least 1")

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        return (1, None), (1, 1)

    def _check_map(self, index: int, shape: Shape) -> tuple[int, int, int]:
        """(c, h, w) of input ``index``; ncnn needs ``c // num_box == 5 + num_class``."""
        if len(shape) != 3:
            raise ValueError(f"input {index} must be a 3-D blob (c, h, w), got shape {shape}")
        c, h, w = shape
        if c // self.num_box != 5 + self.num_class:
            raise ValueError(
                f"input {index} has {c} channels; {self.type_name} needs num_box "
                f"({self.num_box}) groups of 5 + num_class ({self.num_class}) = "
                f"{self.num_box * (5 + self.num_class)}"
            )
        return c, h, w

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        """An upper bound: one row per cell and box of every input (the rows depend on data)."""
        rows = 0
        for index, shape in enumerate(input_shapes):
            _, h, w = self._check_map(index, shape)
            rows += self.num_box * h * w
        return [(rows, 6)]

    def _add_decoded(
        self,
        blob: np.ndarray,
        anchors: list[tuple[np.float32, np.float32]] | np.ndarray,
        found: _Candidates,
        softmax_all: bool = False,
    ) -> None:
        """Decode one map in C with each box's (w, h) scale and gather its candidates."""
        box_scales = np.asarray(anchors, _F32)
        threshold = self.confidence_threshold
        rows = yolo_decode(
            blob, self.num_box, self.num_class, box_scales, threshold, self.v3_decode,
            softmax_all=softmax_all,
        )  # fmt: skip
        found.add(rows)


@register_layer("YoloDetectionOutput")
class YoloDetectionOutput(_YoloOutput):
    """YOLOv2 region output: softmax over the class logits, sigmoid objectness, anchors
    ``biases`` (w, h pairs, one per box) in grid cells; overlap compared as inter / union."""

    def validate(self) -> None:
        super().validate()
        need = 2 * self.num_box
        if len(self.biases) < need:
            raise ValueError(
                f"param 4 (biases) has {len(self.biases)} values; YoloDetectionOutput needs a "
                f"(w, h) pair per box: 2 x num_box (param 1, {self.num_box}) = {need}"
            )

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        found = _Candidates()
        first: np.ndarray | None = None
        with np.errstate(all="ignore"):
            for index, blob in enumerate(inputs):
                _, h, w = self._check_map(index, blob.shape)
                if index == 0:
                    # ncnn's softmax is in place, and with nothing found its output is this
                    # input: a copy, every cell of it softmaxed. The other maps are only read,
                    # and only their hopeful cells softmaxed (``yolo_decode``)
                    first = np.array(blob, dtype=np.float32, order="C")
                    self._decode(first, h, w, found, softmax_all=True)
                else:
                    self._decode(np.ascontiguousarray(blob, dtype=np.float32), h, w, found)
            rows = found.detections(self.nms_threshold, "divide")
        if len(rows) == 0 and first is not None:
            return [first]
        return [rows]

    def _decode(
        self, blob: np.ndarray, h: int, w: int, found: _Candidates, softmax_all: bool = False
    ) -> None:
        self._add_decoded(blob, self._box_scales(h, w), found, softmax_all)

    def _box_scales(self, h: int, w: int) -> np.ndarray:
        """Each box's (w, h) scale on an h x w map; reciprocals as in Yolov3DetectionOutput:
        the closest to ncnn's build. Kept per map size: the same few come at every forward."""
        known: dict[tuple[int, int], np.ndarray] = self.__dict__.setdefault("_scales", {})
        if (h, w) not in known:
            known[(h, w)] = self._scales_for(h, w)
        return known[(h, w)]

    def _scales_for(self, h: int, w: int) -> np.ndarray:
        inv_w, inv_h = _ONE / _F32(w), _ONE / _F32(h)
        scales = np.array(
            [
                (_F32(self.biases[2 * pp]) * inv_w, _F32(self.biases[2 * pp + 1]) * inv_h)
                for pp in range(self.num_box)
            ],
            _F32,
        )
        scales.flags.writeable = False
        return scales


@register_layer("Yolov3DetectionOutput")
class Yolov3DetectionOutput(_YoloOutput):
    """YOLOv3 output: sigmoid objectness and class logits, anchors chosen per input through
    ``mask`` from ``biases`` (pixel w, h pairs), input ``b`` of stride ``anchors_scale[b]``;
    overlap compared as inter > t x union. ncnn's confidence is 1 / (1 + e^-obj (1 + e^-cls)),
    not sigmoid(obj) x sigmoid(cls): reproduced as ncnn computes it."""

    v3_decode = True
    mask = Param(5, floats)
    anchors_scale = Param(6, floats)

    def _read_arrays(self, pd: ParamDict) -> None:
        super()._read_arrays(pd)
        self.__dict__["mask"] = ncnn_mask_array(pd, 5)
        self.__dict__["anchors_scale"] = ncnn_float_array(pd, 6)

    def validate(self) -> None:
        """ncnn's load_param rules: (w, h) pairs of biases, whole groups of num_box anchor
        indexes in mask, a positive stride in anchors_scale for each group."""
        super().validate()
        if not self.biases or len(self.biases) % 2:
            raise ValueError(
                f"param 4 (biases) has {len(self.biases)} values; it needs (w, h) pairs"
            )
        pairs = len(self.biases) // 2
        if not self.mask or len(self.mask) % self.num_box:
            raise ValueError(
                f"param 5 (mask) has {len(self.mask)} values; it needs groups of num_box "
                f"(param 1, {self.num_box}) anchor indexes, one group per input"
            )
        for k, m in enumerate(self.mask):
            if not (m.is_integer() and 0 <= m < pairs):
                raise ValueError(
                    f"param 5 (mask) value {k} = {m:g} is not the index of one of the {pairs} "
                    "(w, h) pairs of param 4 (biases)"
                )
        groups = len(self.mask) // self.num_box
        if len(self.anchors_scale) < groups:
            raise ValueError(
                f"param 6 (anchors_scale) has {len(self.anchors_scale)} values; param 5 (mask) "
                f"has {groups} groups of num_box (param 1, {self.num_box}), one stride each"
            )
        for k, a in enumerate(self.anchors_scale):
            if not (np.isfinite(a) and a > 0):
                raise ValueError(f"param 6 (anchors_scale) value {k} = {a:g} must be > 0")

    def check_blob_counts(self, bottoms: int, tops: int) -> None:
        """Also: a mask group and a stride for each input (ncnn reads past the arrays)."""
        super().check_blob_counts(bottoms, tops)
        groups = len(self.mask) // self.num_box
        if groups < bottoms:
            raise ValueError(
                f"param 5 (mask) has {groups} groups of num_box (param 1, {self.num_box}) "
                f"anchor indexes for {bottoms} inputs; it needs one group per input"
            )

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        self.check_blob_counts(len(input_shapes), 1)
        for index, shape in enumerate(input_shapes):
            if len(shape) == 3:
                self._net_size(index, shape[2], shape[1])
        return super().output_shapes(input_shapes)

    def _net_size(self, index: int, w: int, h: int) -> tuple[np.float32, np.float32]:
        """ncnn's ``(int)(anchors_scale[b] * w)`` and the same for h, as float32 divisors."""
        scale = _F32(self.anchors_scale[index])
        sizes = []
        for n in (w, h):
            product = float(scale * _F32(n))
            if not -(2**31) <= product < 2**31:
                raise ValueError(
                    f"param 6 (anchors_scale) value {index} = {scale:g} x {n} does not fit an int"
                )
            sizes.append(_F32(int(product)))
        return sizes[0], sizes[1]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        found = _Candidates()
        with np.errstate(all="ignore"):
            for index, blob in enumerate(inputs):
                _, h, w = self._check_map(index, blob.shape)
                self._decode(index, np.ascontiguousarray(blob, dtype=np.float32), h, w, found)
            rows = found.detections(self.nms_threshold, "multiply")
        return [rows if len(rows) else np.zeros(0, dtype=np.float32)]  # ncnn's empty Mat

    def _decode(self, index: int, blob: np.ndarray, h: int, w: int, found: _Candidates) -> None:
        net_w, net_h = self._net_size(index, w, h)
        anchors = []
        for pp in range(self.num_box):
            anchor = int(self.mask[index * self.num_box + pp])
            # ncnn's build multiplies by hoisted reciprocals (checked bit for bit)
            anchors.append(
                (
                    _F32(self.biases[2 * anchor]) * (_ONE / net_w),
                    _F32(self.biases[2 * anchor + 1]) * (_ONE / net_h),
                )
            )
        self._add_decoded(blob, anchors, found)
