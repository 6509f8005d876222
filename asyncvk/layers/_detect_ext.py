"""The detection layers' host loops in C (``_detect.c``), behind size-checked numpy wrappers.

ncnn runs its sort, NMS and YOLO decode as scalar C++ loops; in numpy they cost 10-20 ms a
forward (a greedy NMS and an unstable quicksort are loops by nature). The C functions are those
loops in ncnn's float32 operand order, with the C library's ``expf`` as ncnn calls it. Every
wrapper makes its arrays contiguous float32 (or int64) and sizes the outputs itself, so the C
side never reads or writes past what it was handed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

try:
    from . import _detect_cffi  # type: ignore[attr-defined]  # built at install time
except ImportError as exc:  # pragma: no cover - a broken install
    raise ImportError(
        "asyncvk's detection extension is missing: reinstall asyncvk with a C compiler and the "
        "Python headers present, or build it in place: python asyncvk/layers/_detect_build.py"
    ) from exc

_ffi: Any = _detect_cffi.ffi
_lib: Any = _detect_cffi.lib
for _name in dir(_lib):  # realized now, on one thread (python-cffi/cffi#271)
    getattr(_lib, _name)
del _name


def _floats(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32)


def _ptr(ctype: str, array: np.ndarray, *, writes: bool = False) -> Any:
    """A C array over ``array``'s memory that keeps ``array`` alive as long as it lives; one
    the C side ``writes`` must be writable (cffi would otherwise hand out read-only memory)."""
    if not array.flags.c_contiguous or array.dtype != _DTYPES[ctype]:
        raise ValueError(f"a C {ctype} needs a C-contiguous {_DTYPES[ctype]} array")
    return _ffi.from_buffer(ctype, array, require_writable=writes)


_DTYPES = {"float[]": np.dtype(np.float32), "int64_t[]": np.dtype(np.int64)}


def qsort_order(scores: np.ndarray) -> np.ndarray:
    """The permutation ncnn's ``qsort_descent_inplace`` leaves ``scores`` in (int64)."""
    work = np.array(scores, dtype=np.float32).reshape(-1)  # a copy: the C sort moves it
    order = np.empty(work.size, dtype=np.int64)
    _lib.detect_qsort_order(_ptr("float[]", work), _ptr("int64_t[]", order), work.size)
    return order


def nms(boxes: np.ndarray, areas: np.ndarray, threshold: float, multiply: bool) -> np.ndarray:
    """ncnn's ``nms_sorted_bboxes`` over (n, 4) ``boxes`` and (n,) ``areas``: kept indexes."""
    boxes = _floats(boxes)
    areas = _floats(areas).reshape(-1)
    n = len(boxes)
    if boxes.shape != (n, 4) or areas.shape != (n,):
        raise ValueError(f"nms: boxes {boxes.shape} and areas {areas.shape} must be (n, 4), (n,)")
    picked = np.empty(n, dtype=np.int64)
    scratch = np.empty(5 * n, dtype=np.float32)
    count = _lib.detect_nms(
        _ptr("float[]", boxes),
        _ptr("float[]", areas),
        n,
        float(np.float32(threshold)),
        int(multiply),
        _ptr("int64_t[]", picked),
        _ptr("float[]", scratch),
    )
    return picked[:count]


def best_class(scores: np.ndarray, floor: float) -> tuple[np.ndarray, np.ndarray]:
    """ncnn's scan for each cell's best class over axis 0 of ``scores``: (labels, scores)."""
    scores = _floats(scores)
    classes = scores.shape[0] if scores.ndim else 0
    cells = scores.size // classes if classes else 0
    label = np.zeros(cells, dtype=np.int64)
    best = np.empty(cells, dtype=np.float32)
    _lib.detect_best_class(
        _ptr("float[]", scores),
        classes,
        cells,
        float(np.float32(floor)),
        _ptr("int64_t[]", label),
        _ptr("float[]", best),
    )
    shape = scores.shape[1:]
    return label.reshape(shape), best.reshape(shape)


def yolo_decode(
    blob: np.ndarray,
    num_box: int,
    num_class: int,
    anchors: np.ndarray,
    threshold: float,
    v3: bool,
    *,
    softmax_all: bool = False,
) -> np.ndarray:
    """One (c, h, w) map's candidate rows ``[score, xmin, ymin, xmax, ymax, area, label]``.

    ``anchors`` holds each box's (w, h) scale, ``v3`` picks Yolov3DetectionOutput's decode over
    YoloDetectionOutput's. With ``softmax_all`` the latter softmaxes every cell's class logits
    in ``blob``, in place, as ncnn does (so ``blob`` must be a C-contiguous float32 array);
    without it only cells that can reach ``threshold`` are softmaxed, aside, and the rows are
    the same.
    """
    _, h, w = blob.shape
    if not blob.flags.c_contiguous or blob.dtype != np.float32:
        raise ValueError("yolo_decode: the map must be a C-contiguous float32 array")
    anchors = _floats(anchors).reshape(-1)
    if num_box < 0 or num_class < 1:
        raise ValueError(f"yolo_decode: {num_box} boxes of {num_class} classes")
    if blob.shape[0] < num_box * (5 + num_class) or anchors.size < 2 * num_box:
        raise ValueError(
            f"yolo_decode: a map of {blob.shape[0]} channels or {anchors.size} anchor scales "
            f"is too small for {num_box} boxes of {num_class} classes"
        )
    out = np.empty((num_box * h * w, 7), dtype=np.float32)
    threshold = float(np.float32(threshold))
    best = _ptr("float[]", np.empty(h * w, dtype=np.float32))
    label = _ptr("int64_t[]", np.empty(h * w, dtype=np.int64))
    if v3:
        rows = _lib.detect_yolov3_decode(
            _ptr("float[]", blob), num_box, num_class, h, w, _ptr("float[]", anchors),
            threshold, _ptr("float[]", out), best, label,
        )  # fmt: skip
    else:
        gathered = _ptr("float[]", np.empty(0 if softmax_all else num_class * h * w, np.float32))
        kept = _ptr("int64_t[]", np.empty(h * w, dtype=np.int64))
        rows = _lib.detect_yolo_decode(
            _ptr("float[]", blob, writes=softmax_all), num_box, num_class, h, w,
            _ptr("float[]", anchors), threshold, int(softmax_all), _ptr("float[]", out), best,
            label, gathered, kept,
        )  # fmt: skip
    return out[:rows]


def ssd_rows(
    conf: np.ndarray,
    mxnet: bool,
    boxes: np.ndarray,
    threshold: float,
    top_k: int,
    nms_threshold: float,
) -> np.ndarray:
    """DetectionOutput's rows ``[label, score, xmin, ymin, xmax, ymax]`` of classes 1.. in
    order: per class the scores over ``threshold``, sorted, cut to ``top_k``, NMS.

    ``conf`` is (num_prior, num_class), or (num_class, num_prior) for mxnet-ssd; ``boxes``
    (num_prior, 4).
    """
    conf = _floats(conf)
    boxes = _floats(boxes)
    num_class, num_prior = conf.shape if mxnet else conf.shape[::-1]
    if boxes.shape != (num_prior, 4):
        raise ValueError(f"ssd_rows: boxes {boxes.shape} for {num_prior} priors")
    prior_stride, class_stride = (1, num_prior) if mxnet else (num_class, 1)
    out = np.empty((max(num_class - 1, 0) * min(max(top_k, 0), num_prior), 6), np.float32)
    floats = np.empty(11 * num_prior, np.float32)
    ints = np.empty(3 * num_prior, np.int64)
    rows = _lib.detect_ssd_rows(
        _ptr("float[]", conf),
        num_prior,
        num_class,
        prior_stride,
        class_stride,
        _ptr("float[]", boxes),
        float(np.float32(threshold)),
        max(top_k, 0),
        float(np.float32(nms_threshold)),
        _ptr("float[]", out),
        len(out),
        _ptr("float[]", floats),
        _ptr("int64_t[]", ints),
    )
    if rows < 0:  # pragma: no cover - the room above is always enough
        raise RuntimeError("ssd_rows: more rows than (num_class - 1) x min(top_k, num_prior)")
    return out[:rows]
