"""Quantize, Dequantize and Requantize against ncnn itself (the wheel's CPU): the GPU path on
lavapipe and the CPU path, 1-D to 4-D blobs, one scale or one per channel, bias, the fused
activations; bad params are a ModelFormatError naming the param.

ncnn's Quantize and Requantize give an int8 Mat, which its extractor returns as float32 integer
values: asyncvk's integer blobs are those values (asyncvk/layers/quantize.py). Dequantize and
Requantize read an int32 Mat, which the wheel is given from an int32 array; asyncvk is given
the same array (as float32). ncnn's own Quantize -> Dequantize reads the int8 bytes as int32
(garbage), so a chain is checked against ncnn's layers run one by one, the int8 values
handed on as int32."""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import Model, assert_close_to_ncnn, asyncvk_forward, raw, write_model

from asyncvk import InputError, Net
from asyncvk._errors import ModelFormatError

pytest.importorskip("ncnn")
pytestmark = needs_vulkan


def ncnn_run(model: Model, x: np.ndarray, output: str = "out", **options: bool) -> np.ndarray:
    """ncnn's output for ``x`` given as it is (an int32 array becomes an int32 Mat)."""
    ncnn = pytest.importorskip("ncnn")
    net = ncnn.Net()
    net.opt.use_vulkan_compute = False
    net.opt.use_fp16_storage = net.opt.use_fp16_packed = net.opt.use_bf16_storage = False
    net.opt.num_threads = 1
    for name, value in options.items():
        setattr(net.opt, name, value)
    assert net.load_param(str(model.param)) == 0 and net.load_model(str(model.bin)) == 0
    ex = net.create_extractor()
    ex.input("in0", ncnn.Mat(np.ascontiguousarray(x)).clone())
    status, mat = ex.extract(output)
    assert status == 0, f"ncnn cannot extract {output!r}"
    result = np.array(mat, np.float32, copy=True)
    del mat, ex
    net.clear()
    return result


def one_layer(tmp_path: Path, line: str, weights: list[np.ndarray], name: str = "m") -> Model:
    kind, _, params = line.partition(" ")
    text = f"7767517\n2 2\nInput in0 0 1 in0\n{kind} op0 1 1 in0 out {params}\n"
    return write_model(tmp_path, text, [raw(w) for w in weights], name)


async def ours(model: Model, x: np.ndarray, gpu: bool, output: str = "out") -> np.ndarray:
    got, cpu_types = await asyncvk_forward(model, {"in0": x}, [output], gpu=gpu)
    assert not cpu_types, f"fell back to the CPU: {cpu_types}"
    return got[output]


def rng_for(id: str) -> np.random.Generator:
    return np.random.default_rng(zlib.crc32(id.encode()))


def channels(shape: tuple[int, ...]) -> int:
    return 1 if len(shape) == 1 else shape[0]


def scales(rng: np.random.Generator, shape: tuple[int, ...], per_channel: bool) -> np.ndarray:
    n = channels(shape) if per_channel else 1
    return rng.uniform(3.0, 20.0, n).astype(np.float32)


#: the edges of float2int8: ties either side, the saturation bounds, far beyond, NaN, inf
SPECIAL = [0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 126.5, -126.5, 127.4, -127.6, 200.0, -1e9]
SPECIAL += [3e9, -3e9, np.inf, -np.inf, np.nan, 0.0, -0.0, 0.49999997, -0.49999997]

SHAPES = [(37,), (5, 13), (3, 7, 9), (2, 3, 5, 7), (4, 6, 5), (8, 3, 3), (12, 5), (16, 2, 3, 3)]
PARAMETRIZE_SHAPES = pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
GPU_CPU = pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])


@GPU_CPU
@PARAMETRIZE_SHAPES
@pytest.mark.parametrize("per_channel", [False, True], ids=["one-scale", "per-channel"])
async def test_quantize_matches_ncnn(
    tmp_path: Path, shape: tuple[int, ...], per_channel: bool, gpu: bool
) -> None:
    rng = rng_for(f"q{shape}{per_channel}")
    scale = scales(rng, shape, per_channel)
    x = rng.uniform(-45, 45, shape).astype(np.float32)
    model = one_layer(tmp_path, f"Quantize 0={scale.size}", [scale])
    theirs = ncnn_run(model, x)
    got = await ours(model, x, gpu)
    assert np.abs(theirs).max() == 127, "the case should saturate"
    np.testing.assert_array_equal(got, theirs)


@GPU_CPU
async def test_quantize_edges_match_ncnn(tmp_path: Path, gpu: bool) -> None:
    """Ties round away from zero, saturation at +-127, NaN and infinities as x86 gives them;
    twice over, so ncnn's SIMD lanes and its scalar tail both see each value."""
    x = np.array(SPECIAL * 2 + [0.5, 1.5, 2.5], np.float32)
    model = one_layer(tmp_path, "Quantize", [np.array([1.0])])
    theirs = ncnn_run(model, x)
    got = await ours(model, x, gpu)
    np.testing.assert_array_equal(got, theirs)
    assert got[:4].tolist() == [1, -1, 2, -2]


def dequantize_weights(
    rng: np.random.Generator, shape: tuple[int, ...], scale_pc: bool, bias: str
) -> tuple[str, list[np.ndarray]]:
    scale = scales(rng, shape, scale_pc) / 64
    params = f"0={scale.size}"
    weights = [scale]
    if bias != "none":
        b = rng.uniform(-3, 3, channels(shape) if bias == "per-channel" else 1)
        weights.append(b.astype(np.float32))
        params += f" 1={b.size}"
    return params, weights


def int32_input(rng: np.random.Generator, shape: tuple[int, ...], high: int) -> np.ndarray:
    x = rng.integers(-high, high, shape, dtype=np.int32)
    x.flat[:3] = [high, -high, 0][: x.size]
    return x


@GPU_CPU
@PARAMETRIZE_SHAPES
@pytest.mark.parametrize(
    ("scale_pc", "bias"),
    [
        (False, "none"),
        (True, "none"),
        (False, "one"),
        (True, "per-channel"),
        (False, "per-channel"),
    ],
)
async def test_dequantize_matches_ncnn(
    tmp_path: Path, shape: tuple[int, ...], scale_pc: bool, bias: str, gpu: bool
) -> None:
    rng = rng_for(f"dq{shape}{scale_pc}{bias}")
    params, weights = dequantize_weights(rng, shape, scale_pc, bias)
    x = int32_input(rng, shape, 100000)
    model = one_layer(tmp_path, f"Dequantize {params}", weights)
    theirs = ncnn_run(model, x)
    got = await ours(model, x, gpu)
    assert_close_to_ncnn(got, theirs, ulps=1)


@GPU_CPU
async def test_dequantize_reads_large_int32_as_ncnn_converts_them(
    tmp_path: Path, gpu: bool
) -> None:
    """Past 2**24 an int32 becomes the nearest float32: ncnn's conversion and asyncvk's
    (of the given array) round alike."""
    x = np.array([2**24 + 1, 2**31 - 1, -(2**31), 123456789, -987654321, 7] * 3, np.int32)
    model = one_layer(tmp_path, "Dequantize 0=1 1=1", [np.array([0.5]), np.array([0.25])])
    assert_close_to_ncnn(await ours(model, x, gpu), ncnn_run(model, x), ulps=0)


ACTIVATIONS = [
    ("none", ""),
    ("relu", "3=1"),
    ("leakyrelu", "3=2 -23304=1,0.1"),
    ("clip", "3=3 -23304=2,-0.5,1.5"),
    ("sigmoid", "3=4"),
    ("mish", "3=5"),
    ("hardswish", "3=6 -23304=2,0.2,0.5"),
]


@GPU_CPU
@PARAMETRIZE_SHAPES
@pytest.mark.parametrize(("act", "act_params"), ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
async def test_requantize_matches_ncnn(
    tmp_path: Path, shape: tuple[int, ...], act: str, act_params: str, gpu: bool
) -> None:
    rng = rng_for(f"rq{shape}{act}")
    n = channels(shape)
    scale_in = rng.uniform(0.5, 2.0, n).astype(np.float32) / 500
    sigmoid = act == "sigmoid"  # (0, 1) out: one large scale makes it saturate
    scale_out = rng.uniform(150, 250, 1) if sigmoid else rng.uniform(20, 60, n)
    scale_out = scale_out.astype(np.float32)
    bias = rng.uniform(-1, 1, n).astype(np.float32)
    model = one_layer(
        tmp_path,
        f"Requantize 0={n} 1={scale_out.size} 2={n} {act_params}",
        [scale_in, scale_out, bias],
    )
    x = int32_input(rng, shape, 2000)
    x.flat[:2] = [50000, -50000]  # past the saturation bounds, but for clip
    # ncnn's x86 Requantize uses the first of 4 packed channels' scales (see quantize.py)
    packs_by_4 = n % 4 == 0 and n % 8 != 0
    theirs = ncnn_run(model, x, use_packing_layout=not packs_by_4)
    got = await ours(model, x, gpu)
    assert act == "clip" or np.abs(theirs).max() == 127, "the case should saturate"
    if act in ("sigmoid", "mish"):  # the wheel's SIMD exp is an approximation: +-1 at a tie
        assert np.abs(got - theirs).max() <= 1 and (got != theirs).mean() < 0.01
    else:
        np.testing.assert_array_equal(got, theirs)


@GPU_CPU
async def test_requantize_shared_scales_without_bias(tmp_path: Path, gpu: bool) -> None:
    shape = (5, 6, 7)
    x = int32_input(rng_for("rq-shared"), shape, 5000)
    model = one_layer(tmp_path, "Requantize", [np.array([0.003]), np.array([7.5])])
    np.testing.assert_array_equal(await ours(model, x, gpu), ncnn_run(model, x))


CHAIN = """7767517
4 4
Input in0 0 1 in0
Quantize q 1 1 in0 q 0={c}
Requantize rq 1 1 q rq 0={c} 1=1 2={c} 3=1
Dequantize dq 1 1 rq out 0=1 1={c}
"""


@GPU_CPU
@pytest.mark.parametrize("shape", [(3, 7, 9), (8, 5), (2, 3, 4, 5)], ids=str)
async def test_a_chain_matches_ncnns_layers_one_by_one(
    tmp_path: Path, shape: tuple[int, ...], gpu: bool
) -> None:
    """Quantize -> Requantize (ReLU) -> Dequantize in one model, against ncnn's three layers
    run apart, each int8 output handed to the next as int32 (what the chain means)."""
    rng = rng_for(f"chain{shape}")
    c = shape[0]
    q_scale = rng.uniform(5, 15, c).astype(np.float32)
    rq_in = (1 / q_scale).astype(np.float32)
    rq_out, rq_bias = np.array([30.0], np.float32), rng.uniform(-1, 1, c).astype(np.float32)
    dq_scale, dq_bias = np.array([1 / 30], np.float32), rng.uniform(-1, 1, c).astype(np.float32)
    weights = [q_scale, rq_in, rq_out, rq_bias, dq_scale, dq_bias]
    chain = write_model(tmp_path, CHAIN.format(c=c), [raw(w) for w in weights], "chain")
    x = rng.uniform(-10, 10, shape).astype(np.float32)

    q = ncnn_run(one_layer(tmp_path, f"Quantize 0={c}", [q_scale], "q"), x)
    line = f"Requantize 0={c} 1=1 2={c} 3=1"
    rq = ncnn_run(one_layer(tmp_path, line, [rq_in, rq_out, rq_bias], "rq"), q.astype(np.int32))
    line = f"Dequantize 0=1 1={c}"
    theirs = ncnn_run(one_layer(tmp_path, line, [dq_scale, dq_bias], "dq"), rq.astype(np.int32))

    got, cpu_types = await asyncvk_forward(chain, {"in0": x}, ["q", "rq", "out"], gpu=gpu)
    assert not cpu_types, cpu_types
    np.testing.assert_array_equal(got["q"], q)
    np.testing.assert_array_equal(got["rq"], rq)
    assert_close_to_ncnn(got["out"], theirs, ulps=1)


BAD_PARAMS = [
    ("Quantize 0=0", "Quantize param 0 (scale_data_size) = 0: must be 1..1048576"),
    ("Quantize 0=-3", "Quantize param 0 (scale_data_size) = -3: must be 1..1048576"),
    ("Dequantize 1=-1", "Dequantize param 1 (bias_data_size) = -1: must be 0..1048576"),
    ("Dequantize 0=2000000", "Dequantize param 0 (scale_data_size) = 2000000: must be"),
    ("Requantize 1=0", "Requantize param 1 (scale_out_data_size) = 0: must be 1..1048576"),
    ("Requantize 3=7", "Requantize param 3 activation_type=7 is not supported (0..6)"),
    ("Requantize 3=2", "Requantize param 4 activation_params needs 1 values for activation_type"),
    ("Requantize 3=3 -23304=1,0.5", "Requantize param 4 activation_params needs 2 values"),
]


@pytest.mark.parametrize(("line", "message"), BAD_PARAMS, ids=[b[0] for b in BAD_PARAMS])
async def test_bad_params_name_file_line_layer_and_param(
    tmp_path: Path, line: str, message: str
) -> None:
    model = one_layer(tmp_path, line, [np.ones(8, np.float32)])
    with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
        await asyncvk_forward(model, {"in0": np.ones((4, 4), np.float32)}, ["out"])
    assert (caught.value.file, caught.value.line, caught.value.layer) == (
        str(model.param),
        4,
        "op0",
    )


#: (layer, its weights' length, input shape, message)
BAD_SHAPES = [
    (
        "Quantize 0=3",
        3,
        (5, 4),
        "Quantize: param 0 scale_data_size=3 fits neither 1 nor the 5 rows",
    ),
    ("Dequantize 0=1 1=4", 5, (3, 4, 5), "Dequantize: param 1 bias_data_size=4 fits neither 1"),
    ("Requantize 0=2 1=6", 8, (6, 2, 2), "Requantize: param 0 scale_in_data_size=2 fits neither"),
]


@GPU_CPU
@pytest.mark.parametrize(
    ("line", "n", "shape", "message"), BAD_SHAPES, ids=[b[0] for b in BAD_SHAPES]
)
async def test_per_channel_data_that_does_not_fit_the_blob_is_an_input_error(
    tmp_path: Path, line: str, n: int, shape: tuple[int, ...], message: str, gpu: bool
) -> None:
    """ncnn reads past the scales then: asyncvk names the param and the blob."""
    model = one_layer(tmp_path, line, [np.ones(n, np.float32)])
    with pytest.raises(InputError, match=re.escape(message)):
        await asyncvk_forward(model, {"in0": np.ones(shape, np.float32)}, ["out"], gpu=gpu)


@GPU_CPU
async def test_a_1d_blob_uses_the_first_scale_and_bias_as_ncnn(tmp_path: Path, gpu: bool) -> None:
    x = np.arange(-20, 21, dtype=np.int32) * 37
    weights = [np.array([0.5, 9.0, 9.0]), np.array([1.25, 9.0])]
    model = one_layer(tmp_path, "Dequantize 0=3 1=2", weights)
    theirs = ncnn_run(model, x)
    np.testing.assert_array_equal(await ours(model, x, gpu), theirs)
    np.testing.assert_array_equal(theirs, x * 0.5 + 1.25)


QUANTIZE_INTO_CONV = """7767517
3 3
Input in0 0 1 in0
Quantize q 1 1 in0 q 0=3
Convolution conv 1 1 q out 0=4 1=1 5=1 6=12 8=1
"""


@GPU_CPU
async def test_quantize_into_an_int8_convolution_with_a_bottom_scale_of_1(
    tmp_path: Path, gpu: bool
) -> None:
    """ncnn's int8 Convolution takes an int8 blob as it is; asyncvk's quantizes its input with
    its bottom scale, which gives the same values back when that scale is 1 (quantize.py)."""
    rng = rng_for("q-conv")
    q_scale = np.array([4.0, 9.0, 17.0], np.float32)
    weight = rng.integers(-100, 100, 12).astype(np.float32)
    bias = rng.uniform(-5, 5, 4).astype(np.float32)
    weights = [bytes(4) + weight.tobytes(), raw(bias), raw(np.full(4, 0.5)), raw(np.ones(1))]
    data = [raw(q_scale), *weights]
    model = write_model(tmp_path, QUANTIZE_INTO_CONV, data)
    x = rng.uniform(-10, 10, (3, 5, 6)).astype(np.float32)
    theirs = ncnn_run(model, x)
    got = await ours(model, x, gpu)
    assert_close_to_ncnn(got, theirs, ulps=1)


async def test_an_int8_layer_reading_quantize_output_is_refused_unless_its_scale_is_1(
    tmp_path: Path,
) -> None:
    """ncnn's int8 convolution takes Quantize's int8 blob as it is; asyncvk's quantizes its
    input with its bottom scale again, the same only for a scale of 1: any other is refused at
    load instead of answering differently."""
    text = """7767517
    3 3
    Input in0 0 1 in0
    Quantize q0 1 1 in0 q 0=1
    Convolution c0 1 1 q out0 0=2 1=1 5=1 6=6 8=2
    """
    weight = np.arange(-3, 3, dtype=np.float32)
    scales = [raw(np.full(2, 0.5)), raw(np.full(1, 0.25))]  # the bottom scale: 0.25
    data = [raw(np.full(1, 4.0)), bytes(4) + weight.tobytes(), raw(np.zeros(2)), *scales]
    m = write_model(tmp_path, text, data)
    says = r"m.param:5, .*bottom scale of 0.25 reads the int8 output of Quantize 'q0'"
    with pytest.raises(ModelFormatError, match=says):
        async with Net() as net:
            await net.load_param(m.param)
            await net.load_model(m.bin)
