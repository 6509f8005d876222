"""int8 Convolution, ConvolutionDepthWise and InnerProduct (param 8 int8_scale_term) against
ncnn itself with int8 inference on (the wheel's default): the GPU path on lavapipe and the CPU
path; int8 weights in the .bin; bad params; and ncnn's int8 benchmark models.

ncnn's x86 depthwise int8 code for channel counts that are multiples of 8 (its pack8 layout)
takes 1 / (bottom scale * weight scale) from ``_mm_rcp_ps``, a 12-bit approximation whose
exact values differ between CPUs; asyncvk divides exactly, as ncnn's other paths do. Those
layers are compared with ncnn's packing off (exact), and with it on within a tolerance.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import (
    Model,
    assert_close,
    assert_close_to_ncnn,
    asyncvk_forward,
    ncnn_forward,
    raw,
    write_model,
)

from asyncvk._errors import ModelFormatError
from asyncvk.gpu._shader_choices import Place
from asyncvk.layers._int8 import Int8Scales, float2int8, quantize
from asyncvk.net._modelbin import ModelBinReader

pytest.importorskip("ncnn")

ROOT = Path(__file__).resolve().parent.parent
INT8_PARAMS = Path(__file__).resolve().parent / "ncnn_benchmark" / "int8"
TAG_INT8 = (0x000D4B38).to_bytes(4, "little")


def int8_tagged(values: np.ndarray) -> bytes:
    """A weight stored int8, as ncnn2int8 writes it: the tag, the bytes, padding to 4."""
    data = np.asarray(values, np.int8).tobytes()
    return TAG_INT8 + data + bytes(-len(data) % 4)


def f32(*values: float) -> bytes:
    return raw(np.array(values, np.float32))


# -- rounding and the .bin ------------------------------------------------------------------------


def test_float2int8_rounds_half_away_from_zero_and_saturates() -> None:
    v = np.array([0.5, -0.5, 1.5, 2.5, -2.5, 0.4, 126.5, 127.4, 300, -300], np.float32)
    assert float2int8(v).tolist() == [1, -1, 2, 3, -3, 0, 127, 127, 127, -127]
    # ncnn's SSE/AVX code adds 0.5 in float32 before truncating: 0.49999997 + 0.5 rounds to 1
    assert float2int8(np.float32([0.49999997, -0.49999997])).tolist() == [1, -1]
    # x86's float -> int32 conversion gives INT_MIN past 2**31 and for NaN / inf: ncnn -127
    odd = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9], np.float32)
    assert float2int8(odd).tolist() == [-127] * 5


@needs_vulkan
@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
async def test_quantize_rounds_as_ncnn(tmp_path: Path, gpu: bool) -> None:
    """A 1x1 int8 conv with weight 1 and unit scales gives back the quantized input: exactly
    ncnn's x86 rounding (see the test above). The wheel within one step of it where its build
    decides a tie (a plain ``roundf`` gives 0 for 0.49999997), saturated where the x86 conversion
    cannot hold the value (another CPU's conversion saturates to the other end)."""
    text = "7767517\n2 2\nInput in0 0 1 in0\nConvolution conv 1 1 in0 out0 0=1 1=1 6=1 8=2\n"
    model = write_model(tmp_path, text, [int8_tagged(np.ones(1)), f32(1.0), f32(1.0)])
    ties = [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5, 127.5, 0.49999997, -0.49999997]
    odd = [300.0, -300.0, 3e9, -3e9, float("inf"), float("nan")]
    x = np.array(ties + odd, np.float32).reshape(1, 1, 16)
    theirs = ncnn_forward(model, {"in0": x}, ["out0"])["out0"].reshape(-1)
    ours, _ = await asyncvk_forward(model, {"in0": x}, ["out0"], gpu=gpu)
    wanted = np.array([1, -1, 2, -2, 3, -3, 127, 127, 1, -1, 127, -127, -127, -127, -127, -127])
    assert ours["out0"].reshape(-1).tolist() == wanted.tolist()
    in_range = np.abs(x.reshape(-1)) < 2.0**31
    assert np.abs(theirs[in_range] - wanted[in_range]).max() <= 1, theirs
    assert np.isin(theirs[~in_range], [-127, 127]).all(), theirs


@needs_vulkan
@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
async def test_epilogue_rounds_once_as_ncnns_fused_multiply_add(tmp_path: Path, gpu: bool) -> None:
    """sum * scale_in + bias rounded once, bit for bit: a requantize downstream turns a last-bit
    difference into a whole step now and then (resnet50 drifted to 5e-3 with two roundings).

    Exact against a single rounding computed here; the wheel rounds once where its build fuses
    the multiply-add (AVX2, AVX-512) and twice where it does not, so it is within a step."""
    n = 16 * 128
    text = f"7767517\n2 2\nInput in0 0 1 in0\nConvolution c 1 1 in0 out0 0=16 1=1 5=1 6={n} 8=2\n"
    weight, bias, weight_scales = _ints(1, n), _floats(3, 16), _floats(2, 16, 40, 90)
    weights = [int8_tagged(weight), raw(bias), raw(weight_scales), f32(70.0)]
    model = write_model(tmp_path, text, weights)
    x = np.random.default_rng(4).uniform(-1, 1, (128, 10, 10)).astype(np.float32)
    sums = np.einsum("oc,chw->ohw", weight.reshape(16, 128), quantize(x, np.float32(70)))
    scale_in = Int8Scales(weight_scales, np.float32(70), None).scale_in[:, None, None]
    sums = sums.astype(np.int64).astype(np.float32)  # ncnn's (float)sum
    once = _rounded_once(sums, scale_in, bias[:, None, None])
    twice = sums * scale_in + bias[:, None, None]
    assert (once != twice).sum() > 10, "the case cannot tell one rounding from two"
    theirs = ncnn_forward(model, {"in0": x}, ["out0"])["out0"]
    ours, _ = await asyncvk_forward(model, {"in0": x}, ["out0"], gpu=gpu)
    assert np.array_equal(ours["out0"].view(np.uint32), once.view(np.uint32))
    assert_close_to_ncnn(ours["out0"], theirs, ulps=1, scale=float(np.abs(twice).max()))


def _rounded_once(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``a * b + c`` of float32 arrays rounded once to float32, as a fused multiply-add: the
    product is exact in float64 (24 + 24 bits), the sum's float64 rounding error is found
    exactly (TwoSum) and decides the one case where rounding twice differs, a float64 sum that
    lands on the midpoint between two float32 values."""
    p = a.astype(np.float64) * b.astype(np.float64)
    c64 = np.broadcast_to(c, p.shape).astype(np.float64)
    s = p + c64
    back = s - p
    error = (p - (s - back)) + (c64 - back)
    r = s.astype(np.float32)
    toward = np.nextafter(r, np.where(s > r, np.float32(np.inf), np.float32(-np.inf)))
    midpoint = (r.astype(np.float64) + toward.astype(np.float64)) / 2
    tie = (s == midpoint) & (error != 0)
    above = np.where(error > 0, np.maximum(r, toward), np.minimum(r, toward))
    return np.where(tie, above, r).astype(np.float32)


def test_int8_weights_read_as_int8_with_padding() -> None:
    data = f32(0.25) + int8_tagged(np.array([-127, 5, 127])) + f32(7.0)
    mb = ModelBinReader(data)
    assert mb.load(1, 1).tolist() == [0.25]
    weight = mb.load_int8_or_float(3)
    assert weight.dtype == np.int8 and weight.tolist() == [-127, 5, 127]
    assert mb.load(1, 1).tolist() == [7.0]  # the padding byte was skipped
    mb.check_end()
    # a layer that takes no int8 data still refuses it, naming where
    with pytest.raises(ModelFormatError, match="in a layer that takes no int8 weights"):
        ModelBinReader(int8_tagged(np.zeros(4))).load(4, 0)


# -- single layers against ncnn -------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """An int8 layer line, the weights it reads (bytes, in file order), and an input shape."""

    id: str
    layer: str
    weights: tuple[bytes, ...]
    shape: tuple[int, ...]
    #: ncnn's Option changes for the oracle, and the tolerance (rel L2) that holds
    ncnn_options: tuple[tuple[str, bool], ...] = ()
    rtol: float = 1e-6
    #: the top scale of a requantizing layer: ncnn's blob holds q, asyncvk's q / top scale
    top_scale: float | None = None

    def model(self, folder: Path) -> Model:
        # times 1 on the GPU after it: an int8 layer sent to the CPU then shows in the plan
        text = (
            f"7767517\n3 3\nInput in0 0 1 in0\n{self.layer}\n"
            "BinaryOp keep 1 1 out0 out1 0=2 1=1 2=1\n"
        )
        return write_model(folder, text, self.weights)


def _ints(seed: int, n: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(-127, 128, n)


def _floats(seed: int, n: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, n).astype(np.float32)


def _conv(oc: int, ic: int, k: int, term: int, extra: str, bias: bool = True) -> Case:
    n = oc * ic * k * k
    weights = [int8_tagged(_ints(n, n))]
    if bias:
        weights.append(raw(_floats(oc, oc)))
    weights += [raw(_floats(2, oc, 40, 90)), f32(70.0)]
    top = 35.0 if term > 100 else None
    if top is not None:
        weights.append(f32(top))
    line = f"Convolution conv 1 1 in0 out0 0={oc} 1={k} 5={int(bias)} 6={n} 8={term} {extra}"
    case_id = f"conv{term}-{extra or 'plain'}"
    return Case(case_id, line, tuple(weights), (ic, 9, 11), top_scale=top)


def _depthwise(c: int, term: int, extra: str, packing: bool = True, rtol: float = 1e-6) -> Case:
    n = c * 9
    scales = raw(_floats(3, c, 40, 90)) if term in (1, 101) else f32(60.0)
    weights = [int8_tagged(_ints(n, n)), raw(_floats(c, c)), scales, f32(70.0)]
    top = 35.0 if term > 100 else None
    if top is not None:
        weights.append(f32(top))
    line = f"ConvolutionDepthWise dw 1 1 in0 out0 0={c} 1=3 4=1 5=1 6={n} 7={c} 8={term} {extra}"
    options = () if packing else (("use_packing_layout", False),)
    case_id = f"dw{c}-{term}-{extra}"
    return Case(case_id, line, tuple(weights), (c, 8, 13), options, rtol, top)


def _fp32_weight_conv() -> Case:
    """Weights stored fp32: ncnn quantizes them at load with the weight scales."""
    n = 6 * 4 * 9
    weight = bytes(4) + raw(_floats(1, n))
    weights = (weight, raw(_floats(6, 6)), raw(_floats(2, 6, 60, 120)), f32(50.0))
    line = f"Convolution conv 1 1 in0 out0 0=6 1=3 3=2 4=1 5=1 6={n} 8=1 9=1"
    return Case("conv-fp32-weights", line, weights, (4, 10, 9))


def _zero_scale_conv() -> Case:
    """A weight scale of 0: ncnn's scale_in is 0 there, so that channel is its bias."""
    scales = _floats(2, 5, 40, 90)
    scales[2] = 0.0
    n = 5 * 3
    weights = (int8_tagged(_ints(4, n)), raw(_floats(5, 5)), raw(scales), f32(70.0))
    line = f"Convolution conv 1 1 in0 out0 0=5 1=1 5=1 6={n} 8=2"
    return Case("conv-zero-weight-scale", line, weights, (3, 4, 5))


def _grouped(groups: int) -> Case:
    """ConvolutionDepthWise with 8 / ``groups`` inputs per group: a weight scale per group. At
    4 channels a group, CPU devices (lavapipe, CI) run it in the tiled shader, one group per
    channel tile (this case failed there with the tiled weights packed ungrouped); GPUs take
    another shader."""
    per_group = 8 // groups
    n = 8 * per_group * 9
    weights = (int8_tagged(_ints(5, n)), raw(_floats(6, groups, 40, 90)), f32(70.0))
    line = f"ConvolutionDepthWise dw 1 1 in0 out0 0=8 1=3 4=1 6={n} 7={groups} 8=1"
    return Case(f"grouped-conv-{per_group}-per-group", line, weights, (8, 7, 6))


def _innerproduct(shape: tuple[int, ...], extra: str) -> Case:
    num_input = shape[-1] if len(shape) == 2 else int(np.prod(shape))
    n = 7 * num_input
    weights = (int8_tagged(_ints(6, n)), raw(_floats(7, 7)), raw(_floats(8, 7, 40, 90)), f32(70.0))
    line = f"InnerProduct ip 1 1 in0 out0 0=7 1=1 2={n} 8=1 {extra}"
    return Case(f"ip{len(shape)}d-{extra or 'plain'}", line, weights, shape)


CASES = [
    _conv(7, 5, 3, 2, "4=1 3=2 9=1"),
    _conv(6, 3, 3, 2, "2=2 4=2 9=2 -23310=1,0.1", bias=False),
    _conv(8, 5, 3, 102, "4=1 9=1"),
    _conv(5, 4, 1, 101, "9=3 -23310=2,-0.5,0.8"),
    _fp32_weight_conv(),
    _zero_scale_conv(),
    _depthwise(6, 101, "9=1"),
    _depthwise(6, 2, "3=2"),
    _depthwise(5, 102, "9=1"),
    _depthwise(16, 101, "9=1", packing=False),
    _grouped(4),
    _grouped(2),
    _innerproduct((3, 5, 6), "9=1"),
    _innerproduct((40,), "9=2 -23310=1,0.1"),
]


async def _check(case: Case, folder: Path, gpu: bool, *, cpu_expected: set[str]) -> None:
    model = case.model(folder)
    x = np.random.default_rng(9).uniform(-2, 2, case.shape).astype(np.float32)
    theirs = ncnn_forward(model, {"in0": x}, ["out0"], **dict(case.ncnn_options))["out0"]
    ours, on_cpu = await asyncvk_forward(model, {"in0": x}, ["out0"], gpu=gpu)
    out = ours["out0"]
    if case.top_scale is not None:
        out = out * np.float32(case.top_scale)
    assert_close(out, theirs, f"{case.id} ({'gpu' if gpu else 'cpu'})", case.rtol)
    assert on_cpu == cpu_expected


@needs_vulkan
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
async def test_int8_layer_on_gpu(case: Case, tmp_path: Path) -> None:
    await _check(case, tmp_path, gpu=True, cpu_expected=set())


@needs_vulkan
@pytest.mark.parametrize("tiled", ["always", "never"])
async def test_int8_grouped_layer_in_either_shader(tiled: Place, tmp_path: Path) -> None:
    """4 channels a group: the grouped tiled shader (CPU devices' choice) and the one-output
    shader (GPUs') both match ncnn, and the one forced is the one dispatched, on any device."""
    from asyncvk import Net, Option, get_gpu_info
    from asyncvk.gpu import ShaderChoices
    from asyncvk.layers import _conv_shaders
    from asyncvk.net._dispatch_profile import ProfilingExtractor

    case = _grouped(2)
    model = case.model(tmp_path)
    x = np.random.default_rng(9).uniform(-2, 2, case.shape).astype(np.float32)
    theirs = ncnn_forward(model, {"in0": x}, ["out0"])["out0"]
    async with Net(Option(shader_choices=ShaderChoices(conv_tiled=tiled))) as net:
        await net.load_param(model.param)
        await net.load_model(model.bin)
        async with ProfilingExtractor(net) as ex:
            ex.input("in0", x)
            ours = await ex.extract("out0")
            assert ex.profile is not None
            shaders = {d.shader for d in ex.profile.dispatches}
    choices = ShaderChoices(conv_tiled=tiled)
    here = dataclasses.replace(get_gpu_info(), choices=choices)
    tiled_here = _conv_shaders.tiled_convolution(here)
    want = "convolution_tiled" if tiled_here else "convolution"
    assert want in shaders, shaders
    assert_close(ours, theirs, f"{case.id} ({tiled})", case.rtol)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
async def test_int8_layer_on_cpu(case: Case, tmp_path: Path) -> None:
    await _check(case, tmp_path, gpu=False, cpu_expected=set())


@needs_vulkan
async def test_int8_innerproduct_rows_run_on_the_cpu(tmp_path: Path) -> None:
    """A dims-2 input is a gemm over rows, which only the CPU path does."""
    case = _innerproduct((3, 40), "9=1")
    await _check(case, tmp_path, gpu=True, cpu_expected={"InnerProduct"})


@needs_vulkan
async def test_int8_depthwise_pack8_within_ncnns_reciprocal_error(tmp_path: Path) -> None:
    """ncnn's packed depthwise path scales by ``_mm_rcp_ps`` (12 bits): close, not exact."""
    case = _depthwise(16, 1, "9=1", rtol=1e-3)
    await _check(case, tmp_path, gpu=True, cpu_expected=set())


@needs_vulkan
async def test_requantized_output_feeds_the_next_int8_layer(tmp_path: Path) -> None:
    """conv (8=102) -> depthwise (8=101) -> conv (8=2), each top scale the next bottom scale:
    ncnn passes the int8 values on, asyncvk requantizes the dequantized ones, exactly."""
    text = """7767517
    4 4
    Input in0 0 1 in0
    Convolution a 1 1 in0 a 0=6 1=3 4=1 5=1 6=162 8=102 9=1
    ConvolutionDepthWise b 1 1 a b 0=6 1=3 3=2 4=1 5=1 6=54 7=6 8=101 9=3 -23310=2,-0.5,0.8
    Convolution out 1 1 b out0 0=4 1=1 6=24 8=2
    """
    weights = [
        int8_tagged(_ints(1, 162)), raw(_floats(1, 6)), raw(_floats(2, 6, 40, 90)),
        f32(60.0), f32(30.0),
        int8_tagged(_ints(2, 54)), raw(_floats(3, 6)), raw(_floats(4, 6, 40, 90)),
        f32(30.0), f32(90.0),
        int8_tagged(_ints(3, 24)), raw(_floats(5, 4, 40, 90)), f32(90.0),
    ]  # fmt: skip
    model = write_model(tmp_path, text, weights)
    x = np.random.default_rng(0).uniform(-1, 1, (3, 9, 11)).astype(np.float32)
    theirs = ncnn_forward(model, {"in0": x}, ["out0"])["out0"]
    for gpu in (True, False):
        ours, on_cpu = await asyncvk_forward(model, {"in0": x}, ["out0"], gpu=gpu)
        assert_close(ours["out0"], theirs, f"chain ({gpu=})", 1e-6)
        assert not on_cpu


# -- bad params -----------------------------------------------------------------------------------


async def test_depthwise_int8_scale_term_outside_ncnns_values_is_refused(tmp_path: Path) -> None:
    model = write_model(
        tmp_path,
        "7767517\n2 2\nInput in0 0 1 in0\n"
        "ConvolutionDepthWise dw 1 1 in0 out0 0=4 1=3 6=36 7=4 8=3\n",
    )
    with pytest.raises(ModelFormatError, match="param 8 int8_scale_term=3") as info:
        await asyncvk_forward(model, {"in0": np.zeros((4, 5, 5), np.float32)}, ["out0"])
    assert info.value.line == 4 and info.value.layer == "dw"


async def test_int8_weights_in_a_float_layer_are_refused(tmp_path: Path) -> None:
    model = write_model(
        tmp_path,
        "7767517\n2 2\nInput in0 0 1 in0\nConvolution conv 1 1 in0 out0 0=2 1=1 6=4\n",
        [int8_tagged(np.ones(4))],
    )
    with pytest.raises(ModelFormatError, match="takes no int8 weights") as info:
        await asyncvk_forward(model, {"in0": np.zeros((2, 3, 3), np.float32)}, ["out0"])
    assert info.value.layer == "conv"


# -- ncnn's int8 benchmark models -----------------------------------------------------------------

#: (model, blob compared): the classifiers' last blob before Softmax (the seeded weights make
#: the softmax nearly one-hot, which would hide differences); the detectors' final output.
BENCHMARK = [
    ("squeezenet_int8", "pool10"),
    ("mobilenet_int8", "fc7"),
    ("resnet18_int8", "fc1000"),
    ("googlenet_int8", "loss3/classifier"),
    ("squeezenet_ssd_int8", "output"),
    ("mobilenet_ssd_int8", "output"),
    ("resnet50_int8", "fc1000"),
    ("vgg16_int8", "fc8"),
]
SLOW = {"googlenet_int8", "resnet50_int8", "vgg16_int8", "squeezenet_ssd_int8"}


def _benchmark_params() -> list[object]:
    return [
        pytest.param(name, blob, marks=[pytest.mark.slow] if name in SLOW else [], id=name)
        for name, blob in BENCHMARK
    ]


@pytest.fixture(scope="module")
def int8_suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("int8_suite")


def _generate(folder: Path, name: str) -> tuple[Model, dict[str, np.ndarray]]:
    if not (folder / name / "model.bin").exists():
        script = ROOT / "benchmarks" / "suite_int8.py"
        args = [sys.executable, str(script), "--out", str(folder), "--models", name]
        proc = subprocess.run(args, capture_output=True, text=True, check=True)
        assert "error" not in json.loads(proc.stdout.splitlines()[-1]), proc.stdout
    meta = json.loads((folder / name / "meta.json").read_text())
    x = np.load(folder / name / "input.npy")
    return Model(folder / name / "model.param", folder / name / "model.bin"), {meta["input"]: x}


@pytest.mark.parametrize(("name", "blob"), _benchmark_params())
async def test_int8_benchmark_model_matches_ncnn_on_cpu(
    name: str, blob: str, int8_suite: Path
) -> None:
    """The CPU path against ncnn with packing off: the same arithmetic, so only ncnn's int8
    winograd (integer sums divided by 576 through float) and fused multiply-adds differ."""
    model, inputs = _generate(int8_suite, name)
    theirs = ncnn_forward(model, inputs, [blob], use_packing_layout=False)[blob]
    ours, _ = await asyncvk_forward(model, inputs, [blob], gpu=False)
    assert_close(ours[blob], theirs, name, 1e-5)


@needs_vulkan
@pytest.mark.slow
@pytest.mark.parametrize(("name", "blob"), BENCHMARK[:2], ids=[b[0] for b in BENCHMARK[:2]])
async def test_int8_benchmark_model_runs_on_gpu(name: str, blob: str, int8_suite: Path) -> None:
    """Every int8 layer on the GPU (none falls back), matching ncnn with packing off."""
    model, inputs = _generate(int8_suite, name)
    theirs = ncnn_forward(model, inputs, [blob], use_packing_layout=False)[blob]
    ours, on_cpu = await asyncvk_forward(model, inputs, [blob], gpu=True)
    assert_close(ours[blob], theirs, name, 1e-5)
    assert not on_cpu & {"Convolution", "ConvolutionDepthWise", "InnerProduct"}
