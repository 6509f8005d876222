"""ncnn's benchmark models (``tests/ncnn_benchmark/``) with weights and inputs that keep every
activation in a sane range, for ``test_ncnn_suite.py`` and ``benchmarks/suite_models.py``.

Upstream ships architectures only. The ``.bin`` layout is ncnn's own: the ``ncnn`` wheel loads
the param through a DataReader that records the size of every read, in order, and those sizes
are the authority. The values come from walking the layers in file order, so that each read has
a role: a convolution's or fully connected layer's weights are uniform with a standard deviation
of ``gain / sqrt(fan_in)`` (``gain`` sqrt(2) before a ReLU-like activation, else 1), biases and
shifts are small, BatchNorm slopes are near 1 and its variances in [0.5, 1.5], LayerNorm gammas
near 1. The walk must predict ncnn's reads exactly; a layer type that reads weights the walk
does not know is an error naming it, never silently filled. Everything is seeded: the same bytes
on every machine.

Inputs are uniform in [-1, 1) at benchncnn's sizes, or at the smaller :data:`CI_SIZES` for the
models that accept any size (set ``ASYNCVK_SUITE_NATIVE=1`` for benchncnn's sizes everywhere).
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from asyncvk.layers._registry import layer_class
from asyncvk.net._param_parser import LayerDecl, ParamFile, parse_param

SUITE_DIR = Path(__file__).resolve().parent / "ncnn_benchmark"
#: Set to 1 to run every model at benchncnn's input size.
NATIVE_ENV = "ASYNCVK_SUITE_NATIVE"
#: Input sizes (c, h, w) that benchncnn uses where a param's Input layer declares none.
BENCH_SHAPES = {"FastestDet": (3, 352, 352), "vision_transformer": (3, 384, 384)}
#: Smaller square inputs for the models whose every layer takes any size (global pooling,
#: fully convolutional heads; yolov4-tiny's Crop sizes clamp to the blob as ncnn's do), to keep
#: CI short on lavapipe; multiples of 32 for the detectors. alexnet, googlenet, resnet18/50 and
#: vgg16 (fully connected or fixed 7x7 pooling) and vision_transformer (position embeddings
#: for 12x12 patches) run at their own size.
CI_SIZES: dict[str, int] = {
    **dict.fromkeys(
        (
            "efficientnet_b0", "efficientnetv2_b0", "mnasnet", "mobilenet", "mobilenet_v2",
            "mobilenet_v3", "proxylessnasnet", "regnety_400m", "shufflenet", "shufflenet_v2",
            "squeezenet",
        ),
        128,
    ),
    "FastestDet": 192,
    "mobilenet_ssd": 160,
    "squeezenet_ssd": 160,
    "mobilenet_yolo": 224,
    "mobilenetv2_yolov3": 192,
    "nanodet_m": 160,
    "yolo-fastest-1.1": 160,
    "yolo-fastestv2": 192,
    "yolov4-tiny": 224,
}  # fmt: skip
#: Models that take over ~20 s on lavapipe at their CI size (marked slow; CI still runs them).
SLOW_MODELS = frozenset({"alexnet", "resnet50", "vgg16", "vision_transformer"})
#: Layer types whose work is post-processing, allowed to run on the CPU in a GPU plan, and
#: asyncvk's CPU-only bookkeeping types.
CPU_ALLOWED = frozenset(
    {"DetectionOutput", "YoloDetectionOutput", "Yolov3DetectionOutput", "Input", "MemoryData"}
)

#: ncnn's fused activation_type values (param 9) after which a ReLU-like gain applies:
#: ReLU, LeakyReLU, Clip, Mish, HardSwish (not 4, Sigmoid).
_RELU_LIKE_FUSED = {1, 2, 3, 5, 6}
_RELU_LIKE_TYPES = {"ReLU", "Clip", "PReLU", "Swish", "HardSwish", "Mish", "GELU"}
_SQRT2 = math.sqrt(2.0)


def suite_params() -> list[Path]:
    """The 27 fp32 .param files, sorted by name."""
    return sorted(SUITE_DIR.glob("*.param"))


@dataclass(frozen=True)
class Tensor:
    """One weight ncnn reads for a layer: ``count`` floats, after a 4-byte tag when ``tagged``
    (ncnn's ``ModelBin::load(w, 0)``), raw otherwise (``load(w, 1)``)."""

    layer: str
    line: int
    role: str
    count: int
    tagged: bool
    fan_in: int = 1
    gain: float = 1.0

    def read_sizes(self) -> list[int]:
        """The byte sizes of ncnn's reads for this weight."""
        return ([4] if self.tagged else []) + [4 * self.count]

    def values(self, rng: np.random.Generator) -> np.ndarray:
        """Seeded float32 values for the role (uniform, so the bounds are exact)."""
        low, high = self._bounds()
        out = rng.random(self.count, dtype=np.float32)
        out *= np.float32(high - low)
        out += np.float32(low)
        return out

    def _bounds(self) -> tuple[float, float]:
        if self.role == "weight":
            half = self.gain * math.sqrt(3.0 / max(self.fan_in, 1))
            return -half, half
        return _ROLE_BOUNDS[self.role]


_ROLE_BOUNDS = {
    "bias": (-0.1, 0.1),
    "shift": (-0.1, 0.1),
    "mean": (-0.1, 0.1),
    "scale": (0.75, 1.25),
    "variance": (0.5, 1.5),
    "constant": (-0.1, 0.1),
}


# -- the walk: which weights each layer reads ----------------------------------------------------


@functools.cache
def _parsed(param_path: Path) -> ParamFile:
    """``param_path`` parsed once (nanodet_m's extra line is logged once, not per step)."""
    return parse_param(param_path)


def weight_plan(param: ParamFile) -> list[Tensor]:
    """Every weight the layers of ``param`` read, in file order, each with its role."""
    consumers: dict[str, list[str]] = {}
    for layer in param.layers:
        for bottom in layer.bottoms:
            consumers.setdefault(bottom, []).append(layer.type)
    plan: list[Tensor] = []
    for layer in param.layers:
        plan += _layer_tensors(layer, _gain(layer, consumers))
    return plan


def _gain(layer: LayerDecl, consumers: dict[str, list[str]]) -> float:
    """sqrt(2) when the layer's output goes through a ReLU-like activation, else 1."""
    if layer.type in _CONV_LIKE and layer.params.get_int(9, 0) in _RELU_LIKE_FUSED:
        return _SQRT2
    after = [t for top in layer.tops for t in consumers.get(top, [])]
    return _SQRT2 if after and all(t in _RELU_LIKE_TYPES for t in after) else 1.0


def _layer_tensors(layer: LayerDecl, gain: float) -> list[Tensor]:
    p = layer.params

    def t(role: str, count: int, tagged: bool, fan_in: int = 1) -> Tensor:
        return Tensor(layer.name, layer.line, role, count, tagged, fan_in, gain)

    kind = layer.type
    if kind in _CONV_LIKE:
        _refuse_quantized(layer, p.get_int(8, 0), "int8_scale_term (8)")
        num_output, size = p.get_int(0, 0), p.get_int(_CONV_LIKE[kind], 0)
        bias = p.get_int(5 if kind != "InnerProduct" else 1, 0)
        fan_in = size // max(num_output, 1)
        return [t("weight", size, True, fan_in)] + ([t("bias", num_output, False)] if bias else [])
    if kind == "BatchNorm":
        c = p.get_int(0, 0)
        return [t(role, c, False) for role in ("scale", "mean", "variance", "shift")]
    if kind == "LayerNorm":
        n = p.get_int(0, 0)
        return [t("scale", n, False), t("shift", n, False)] if p.get_int(2, 1) else []
    if kind == "MemoryData":
        w, h, d, c = (p.get_int(i, 0) for i in (0, 1, 11, 2))
        return [t("constant", max(w, 1) * max(h, 1) * max(d, 1) * max(c, 1), False)]
    if kind == "Gemm":
        return _gemm_tensors(layer, t)
    if kind == "MultiHeadAttention":
        _refuse_quantized(layer, p.get_int(18, 0), "quantize_term (18)")
        embed = p.get_int(0, 0)
        qdim = p.get_int(2, 0) // max(embed, 1)
        kdim, vdim = p.get_int(3, embed), p.get_int(4, embed)
        out: list[Tensor] = []
        for dim in (qdim, kdim, vdim):
            out += [t("weight", embed * dim, True, dim), t("bias", embed, False)]
        return [*out, t("weight", qdim * embed, True, embed), t("bias", qdim, False)]
    return []


#: Types that read ``load(weight_data_size, 0)`` then ``load(num_output, 1)`` for a bias, with
#: the param id of weight_data_size.
_CONV_LIKE = {
    "Convolution": 6,
    "ConvolutionDepthWise": 6,
    "Deconvolution": 6,
    "DeconvolutionDepthWise": 6,
    "InnerProduct": 2,
}


def _gemm_tensors(layer: LayerDecl, t: Any) -> list[Tensor]:
    p = layer.params
    _refuse_quantized(layer, p.get_int(18, 0), "quantize_term (18)")
    m, n, k = p.get_int(7, 0), p.get_int(8, 0), p.get_int(9, 0)
    out: list[Tensor] = []
    if p.get_int(4, 0):
        out.append(t("weight", m * k, True, k))
    if p.get_int(5, 0):
        out.append(t("weight", k * n, True, k))
    broadcast = p.get_int(10, 0)
    if p.get_int(6, 0) and broadcast != -1:
        count = {0: 1, 1: m, 2: m, 3: m * n, 4: n}.get(broadcast)
        if count is None:
            raise ValueError(f"line {layer.line}: Gemm {layer.name}: broadcast type {broadcast}")
        out.append(t("bias", count, True))
    return out


def _refuse_quantized(layer: LayerDecl, value: int, what: str) -> None:
    if value:
        raise ValueError(f"line {layer.line}: {layer.type} {layer.name}: {what} is {value}")


# -- ncnn's reads, and the .bin -----------------------------------------------------------------

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def ncnn_read_sizes(param_path: Path) -> list[int]:
    """The byte size of each read ncnn makes loading weights for ``param_path``, in order."""
    import ncnn

    sizes: list[int] = []

    class Recorder(ncnn.DataReader):  # type: ignore[misc]
        def scan(self, format: str, p: Any) -> int:
            return 0

        def read(self, buf: Any, size: int) -> int:
            ctypes.memset(_capsule_pointer(buf, None), 0, size)
            sizes.append(size)
            return size

    net = ncnn.Net()
    net.opt.use_vulkan_compute = False
    try:
        if net.load_param(str(param_path)) != 0:
            raise ValueError(f"{param_path}: ncnn cannot load it")
        if net.load_model(Recorder()) != 0:
            raise ValueError(f"{param_path}: ncnn cannot read its weights")
    finally:
        net.clear()
    return sizes


def check_plan(param_path: Path, plan: list[Tensor], sizes: list[int]) -> None:
    """Raise ValueError naming the first layer whose reads differ from what ncnn made."""
    i = 0
    for tensor in plan:
        want = tensor.read_sizes()
        got = sizes[i : i + len(want)]
        if got != want:
            raise ValueError(
                f"{param_path}:{tensor.line}: {tensor.layer} ({tensor.role}): ncnn read "
                f"{got} bytes where the walk expects {want}; teach ncnn_suite this layer type"
            )
        i += len(want)
    if i != len(sizes):
        raise ValueError(
            f"{param_path}: ncnn made {len(sizes) - i} more reads ({sum(sizes[i:])} bytes) after "
            f"the last weight the walk knows; a layer type reads weights the walk does not know"
        )


def write_weights(param_path: Path, bin_path: Path, seed: int = 0) -> list[Tensor]:
    """Write ``bin_path`` for ``param_path``, checked against ncnn's reads; what it holds."""
    plan = weight_plan(_parsed(param_path))
    check_plan(param_path, plan, ncnn_read_sizes(param_path))
    rng = np.random.default_rng(seed)
    with open(bin_path, "wb") as f:
        for chunk in _chunks(plan, rng):
            f.write(chunk)
    return plan


def _chunks(plan: list[Tensor], rng: np.random.Generator) -> Iterator[bytes | np.ndarray]:
    for tensor in plan:
        if tensor.tagged:
            yield bytes(4)  # tag 0: raw float32 follows
        yield tensor.values(rng)


# -- calibration: logits that a softmax or a detection layer can tell apart ----------------------

#: Blobs that feed these keep the std below (fan-in scaling leaves softmax logits near zero,
#: so the softmax is flat and hides errors, or exp() in a YOLO box decode overflows).
_CALIBRATED_INPUTS = {"Softmax": 2.0, "YoloDetectionOutput": 1.0, "Yolov3DetectionOutput": 1.0}
#: Layers between a weighted layer and a calibrated blob that commute with a positive scale.
_PASS_THROUGH = {
    "Concat", "Crop", "Dropout", "Flatten", "Interp", "Noop", "Permute", "Pooling", "Reshape",
    "ShuffleChannel", "Slice", "Split",
}  # fmt: skip
#: Weighted layers whose output scales with their weights and bias (activation none or ReLU).
_SCALABLE = {*_CONV_LIKE, "Gemm"}


def calibration_points(param: ParamFile) -> dict[str, tuple[float, list[str]]]:
    """Blob -> (target std, the weighted layers to scale to reach it), for the blobs that feed
    a Softmax whose result reaches an output or a detection layer through pass-through layers,
    and for the inputs of the YOLO detection layers. Blobs with no scalable producers are left
    out."""
    producer = {top: layer for layer in param.layers for top in layer.tops}
    consumers: dict[str, list[LayerDecl]] = {}
    for layer in param.layers:
        for bottom in layer.bottoms:
            consumers.setdefault(bottom, []).append(layer)
    points: dict[str, tuple[float, list[str]]] = {}
    for layer in param.layers:
        target = _CALIBRATED_INPUTS.get(layer.type)
        if target is None or (layer.type == "Softmax" and not _is_final(layer, consumers)):
            continue
        for bottom in layer.bottoms:
            layers = _scalable_producers(bottom, producer)
            if layers:
                points[bottom] = (target, layers)
    return points


def _is_final(layer: LayerDecl, consumers: dict[str, list[LayerDecl]]) -> bool:
    """Whether ``layer``'s tops reach only outputs or detection layers via pass-through."""
    todo = list(layer.tops)
    while todo:
        for user in consumers.get(todo.pop(), []):
            if user.type in _PASS_THROUGH:
                todo += user.tops
            elif not user.type.endswith("DetectionOutput"):
                return False
    return True


def _scalable_producers(blob: str, producer: dict[str, LayerDecl]) -> list[str]:
    """The weighted layers ``blob`` is a positive scale of, or [] when it is not one."""
    found: list[str] = []
    todo = [blob]
    while todo:
        layer = producer.get(todo.pop())
        if layer is None:
            return []
        if layer.type in _PASS_THROUGH:
            todo += layer.bottoms
        elif layer.type in _SCALABLE and _activation(layer) in (0, 1, 2):
            found.append(layer.name)
        else:
            return []
    return found


def _activation(layer: LayerDecl) -> int:
    return layer.params.get_int(9, 0) if layer.type in _CONV_LIKE else 0


def calibrate(
    param_path: Path, bin_path: Path, plan: list[Tensor], input_name: str, x: np.ndarray
) -> dict[str, float]:
    """Scale the weights that feed each calibration point so that ncnn, fed ``x``, gives it the
    target std; the factor applied per blob (1.0 where it already had it)."""
    from ncnn_oracle import Model, ncnn_forward

    points = calibration_points(_parsed(param_path))
    if not points:
        return {}
    got = ncnn_forward(Model(param_path, bin_path), {input_name: x}, list(points))
    offsets, at = {}, 0
    for tensor in plan:
        at += 4 if tensor.tagged else 0
        offsets[id(tensor)] = at
        at += 4 * tensor.count
    factors = {}
    weights = np.memmap(bin_path, dtype=np.uint8, mode="r+")
    for blob, (target, layers) in points.items():
        std = float(np.std(got[blob].astype(np.float64)))
        factor = target / std if std > 0 else 1.0
        for tensor in plan:
            if tensor.layer in layers:
                start = offsets[id(tensor)]
                view = weights[start : start + 4 * tensor.count].view(np.float32)
                view *= np.float32(factor)
        factors[blob] = factor
    weights.flush()
    del weights
    return factors


# -- inputs, outputs, types ----------------------------------------------------------------------


def native_shape(param: ParamFile, stem: str) -> tuple[int, int, int]:
    """(c, h, w) benchncnn feeds: the first Input layer's, else :data:`BENCH_SHAPES`."""
    for layer in param.layers:
        if layer.type == "Input":
            w, h, c = (layer.params.get_int(i, 0) for i in (0, 1, 2))
            if w and h and c:
                return (c, h, w)
            break
    if stem not in BENCH_SHAPES:
        raise ValueError(f"{param.source}: the Input layer declares no shape")
    return BENCH_SHAPES[stem]


def input_shape(param: ParamFile, stem: str, native: bool | None = None) -> tuple[int, int, int]:
    """The shape the suite feeds: native with ``native`` (default: ``ASYNCVK_SUITE_NATIVE``)."""
    if native is None:
        native = os.environ.get(NATIVE_ENV, "") not in ("", "0")
    c, h, w = native_shape(param, stem)
    if not native and stem in CI_SIZES:
        return (c, CI_SIZES[stem], CI_SIZES[stem])
    return (c, h, w)


def make_input(shape: tuple[int, ...], seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def missing_types(param: ParamFile) -> list[str]:
    """The layer types of ``param`` asyncvk does not implement, sorted."""
    import asyncvk.layers._all  # noqa: F401  (every type registers on import)

    return sorted({layer.type for layer in param.layers if layer_class(layer.type) is None})


def cpu_only_types(param: ParamFile) -> list[str]:
    """The registered types of ``param`` with no GPU path that :data:`CPU_ALLOWED` lacks."""
    import asyncvk.layers._all  # noqa: F401  (every type registers on import)

    types = {layer.type for layer in param.layers}
    return sorted(
        t for t in types - CPU_ALLOWED if (cls := layer_class(t)) is not None and not cls.gpu
    )


@dataclass
class SuiteModel:
    """One benchmark model written out: files, its input, and the blobs to compare."""

    name: str
    param: Path
    bin: Path
    input_name: str
    input: np.ndarray
    outputs: tuple[str, ...]


def write_model(
    param_path: Path, folder: Path, native: bool | None = None, seed: int = 0
) -> SuiteModel:
    """Weights for ``param_path`` in ``folder`` (kept there: a second call reuses them),
    calibrated with the input this returns."""
    parsed = _parsed(param_path)
    shape = input_shape(parsed, param_path.stem, native)
    x = make_input(shape)
    input_name = parsed.input_names[0]
    folder.mkdir(parents=True, exist_ok=True)
    bin_path = folder / f"{param_path.stem}-{shape[1]}x{shape[2]}.bin"
    if not bin_path.exists():
        tmp = bin_path.with_suffix(".tmp")
        plan = write_weights(param_path, tmp, seed)
        calibrate(param_path, tmp, plan, input_name, x)
        tmp.replace(bin_path)
    return SuiteModel(param_path.stem, param_path, bin_path, input_name, x, parsed.output_names)


# -- one model against ncnn ----------------------------------------------------------------------


@dataclass
class SuiteResult:
    """What one model gave: rel L2 per compared blob (inf on a shape or finiteness mismatch,
    with ``problems`` saying which), the layer types that ran on the CPU, and seconds per step."""

    name: str
    input_shape: tuple[int, ...]
    rel_l2: dict[str, float] = field(default_factory=dict)
    #: Detection outputs compared row by row as they come, before :func:`match_rows`.
    rel_l2_in_order: dict[str, float] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)
    cpu_types: set[str] = field(default_factory=set)
    seconds: dict[str, float] = field(default_factory=dict)
    bin_bytes: int = 0


async def compare_with_ncnn(
    param_path: Path, folder: Path, native: bool | None = None
) -> SuiteResult:
    """Run ``param_path`` through asyncvk's GPU path (Option defaults: fp32) and the ncnn wheel
    (CPU fp32) on generated weights; every output blob compared. An output that is one value
    repeated whatever the input (vision_transformer's softmax over an axis of size 1) would
    prove nothing at the cost of a whole run, so the blob its layer reads is compared instead.
    Detection outputs are compared as rows paired by :func:`match_rows`. ``load_param`` comes
    first: a model with a layer type asyncvk lacks fails at once, with a ModelFormatError
    naming the types, before any weights are made."""
    from ncnn_oracle import Model, cpu_layer_types, ncnn_forward

    from asyncvk import Net, Option

    clock = time.perf_counter
    async with Net(Option()) as net:
        await net.load_param(param_path)
        t0 = clock()
        model = write_model(param_path, folder, native)
        result = SuiteResult(model.name, model.input.shape, bin_bytes=model.bin.stat().st_size)
        t1 = clock()
        inputs = {model.input_name: model.input}
        oracle = Model(model.param, model.bin)
        blobs = list(model.outputs)
        theirs = ncnn_forward(oracle, inputs, blobs)
        for blob, inner in _inputs_of_constant_outputs(model.param, theirs).items():
            blobs[blobs.index(blob)] = inner
            theirs.update(ncnn_forward(oracle, inputs, [inner]))
        t2 = clock()
        await net.load_model(model.bin)
        t3 = clock()
        ours = {}
        for blob in blobs:
            ex = net.create_extractor()
            ex.input(model.input_name, model.input)
            ours[blob] = await ex.extract(blob)
        t4 = clock()
        result.cpu_types = cpu_layer_types(net)
    layers = _parsed(param_path).layers
    detections = {
        t for layer in layers if layer.type.endswith("DetectionOutput") for t in layer.tops
    }
    for blob in blobs:
        a, b = ours[blob], theirs[blob]
        if blob in detections:
            result.rel_l2_in_order[blob] = rel_l2(a, b)[0]
            a = match_rows(a, b)
        result.rel_l2[blob], problem = rel_l2(a, b)
        if problem:
            result.problems[blob] = problem
    result.seconds = {
        "weights": t1 - t0,
        "ncnn": t2 - t1,
        "asyncvk_load_model": t3 - t2,
        "asyncvk_extract": t4 - t3,
    }
    return result


def _inputs_of_constant_outputs(param: Path, outputs: dict[str, np.ndarray]) -> dict[str, str]:
    """Output -> the blob its one-input layer reads, for outputs of one repeated value."""
    constant = {b for b, v in outputs.items() if v.size > 1 and float(np.ptp(v)) == 0.0}
    return {
        layer.tops[0]: layer.bottoms[0]
        for layer in _parsed(param).layers
        if len(layer.tops) == 1 and len(layer.bottoms) == 1 and layer.tops[0] in constant
    }


def match_rows(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    """``ours`` with its rows reordered to pair each with the nearest row of ``theirs``.

    Detection layers sort boxes by score: two scores that tie within float rounding come out
    in either order, which swaps whole rows. Pairing is greedy on the L2 distance of rows,
    so a row that differs (a box dropped or moved) still shows."""
    if ours.ndim != 2 or ours.shape != theirs.shape or len(ours) < 2:
        return ours
    dist = ((ours[:, None, :].astype(np.float64) - theirs[None, :, :]) ** 2).sum(axis=2)
    n = len(ours)
    taken_ours, taken_theirs = np.zeros(n, bool), np.zeros(n, bool)
    order = np.full(n, -1)
    for flat in np.argsort(dist, axis=None, kind="stable"):
        i, j = divmod(int(flat), n)
        if not taken_ours[i] and not taken_theirs[j]:
            order[j], taken_ours[i], taken_theirs[j] = i, True, True
    return ours[order]


def rel_l2(ours: np.ndarray, theirs: np.ndarray) -> tuple[float, str]:
    """||ours - theirs|| / ||theirs|| (0 when both are empty or zero), and what is wrong when
    the shapes or the positions of non-finite values differ (then inf)."""
    if ours.size == 0 and theirs.size == 0:
        return 0.0, ""
    if ours.shape != theirs.shape:
        return math.inf, f"shape {ours.shape}, ncnn {theirs.shape}"
    a, b = ours.astype(np.float64), theirs.astype(np.float64)
    finite = np.isfinite(b)
    if not np.array_equal(np.isfinite(a), finite):
        return math.inf, "non-finite values where ncnn has finite ones, or the reverse"
    diff = float(np.linalg.norm(a[finite] - b[finite]))
    scale = float(np.linalg.norm(b[finite]))
    return (diff / scale if scale > 0 else (0.0 if diff == 0 else math.inf)), ""
