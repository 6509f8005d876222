"""Hostile model files: whatever a .param/.bin holds, loading and running it ends in a
ModelFormatError (load time) or an InputError (a blob too large for the input given), naming the
file, line and layer; never a traceback from inside, a memory blow-up or a silently wrong result.
NaN planted in the weights comes out where ncnn's reference layers (src/layer/*.cpp) put it.
"""

from __future__ import annotations

import asyncio
import json
import re
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from asyncvk import InputError
from asyncvk._errors import ModelFormatError
from asyncvk.layers._limits import (
    MAX_BLOB_ELEMENTS,
    MAX_CHANNELS,
    MAX_EXTENT,
    MAX_KERNEL,
    MAX_PAD,
    MAX_STRIDE,
)
from asyncvk.net._net import Net
from asyncvk.net._option import Option

MODELS = Path(__file__).parent / "models"
FLT_MAX = np.float32(np.finfo(np.float32).max)


@pytest.fixture(params=["cpu", "gpu"])
def use_vulkan(request: pytest.FixtureRequest) -> bool:
    """Both paths: numpy layers, and the GPU layers on the Vulkan device (lavapipe in CI)."""
    if request.param == "gpu":
        request.getfixturevalue("device")
    return bool(request.param == "gpu")


async def run_net(
    param: Path | bytes,
    weights: Path | bytes,
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    *,
    use_vulkan: bool,
) -> list[np.ndarray]:
    async with Net(Option(use_vulkan_compute=use_vulkan)) as net:
        await net.load_param(param)
        await net.load_model(weights)
        results = []
        for name in outputs:
            ex = net.create_extractor()
            for blob, x in inputs.items():
                ex.input(blob, x)
            results.append(await ex.extract(name))
    return results


async def run_model(model: str, param: Path, *, use_vulkan: bool) -> np.ndarray:
    d = MODELS / model
    meta = json.loads((d / "meta.json").read_text())
    inputs = {meta["input"]: np.load(d / "input.npy")}
    (y,) = await run_net(param, d / "model.bin", inputs, [meta["output"]], use_vulkan=use_vulkan)
    return y


def edit_line(tmp_path: Path, model: str, name: str, edit: object) -> tuple[Path, int]:
    """The model's .param with the layer ``name``'s line passed through ``edit`` (a function
    of the token list); returns the new file and the line number."""
    lines = (MODELS / model / "model.param").read_text().split("\n")
    (number,) = [i for i, line in enumerate(lines) if line.split()[1:2] == [name]]
    lines[number] = " ".join(edit(lines[number].split()))  # type: ignore[operator]
    path = tmp_path / "model.param"
    path.write_text("\n".join(lines))
    return path, number + 1


def with_param(pid: int, value: object) -> object:
    def edit(tokens: list[str]) -> list[str]:
        kept = [t for t in tokens if not t.startswith(f"{pid}=")]
        return [*kept, f"{pid}={value}"]

    return edit


def tiny_param(*layers: str) -> bytes:
    """A .param from layer lines; the blob count is worked out from their tops."""
    tops = sum(int(line.split()[3]) for line in layers)
    return f"7767517\n{len(layers)} {tops}\n{chr(10).join(layers)}\n".encode()


# -- sizes: every size a param gives is checked against a stated limit at load -------------------

HUGE = 2147483647

SIZE_CASES = [
    # squeezenet's first max pooling, line 5: "the traceback" of the fuzz
    *[
        ("squeezenet", "maxpool2d_51", "Pooling", pid, name, HUGE, limit)
        for pid, name, limit in [
            (1, "kernel_w", MAX_KERNEL),
            (11, "kernel_h", MAX_KERNEL),
            (2, "stride_w", MAX_STRIDE),
            (12, "stride_h", MAX_STRIDE),
            (3, "pad_left", MAX_PAD),
            (14, "pad_right", MAX_PAD),
            (13, "pad_top", MAX_PAD),
            (15, "pad_bottom", MAX_PAD),
        ]
    ],
    ("squeezenet", "gap_24", "Pooling", 8, "out_w", HUGE, MAX_EXTENT),
    # cunet's convrelu_3: "the memory blow-up" (14 = 65536 padded the blob to 131k rows)
    *[
        ("cunet", "convrelu_3", "Convolution", pid, name, value, limit)
        for pid, name, value, limit in [
            (14, "pad_top", 65536, MAX_PAD),
            (4, "pad_left", 65536, MAX_PAD),
            (15, "pad_right", 65536, MAX_PAD),
            (16, "pad_bottom", 65536, MAX_PAD),
            (1, "kernel_w", 65536, MAX_KERNEL),
            (11, "kernel_h", 65536, MAX_KERNEL),
            (2, "dilation_w", 65536, MAX_STRIDE),
            (12, "dilation_h", 65536, MAX_STRIDE),
            (3, "stride_w", 65536, MAX_STRIDE),
            (13, "stride_h", 65536, MAX_STRIDE),
            (0, "num_output", 1 << 21, MAX_CHANNELS),
            (6, "weight_data_size", HUGE, MAX_BLOB_ELEMENTS),
        ]
    ],
    ("cunet", "deconvrelu_0", "Deconvolution", 19, "output_pad_bottom", HUGE, MAX_PAD),
    ("cunet", "deconvrelu_0", "Deconvolution", 20, "output_w", HUGE, MAX_EXTENT),
    ("cunet", "fcrelu_0", "InnerProduct", 0, "num_output", 1 << 21, MAX_CHANNELS),
    ("cunet", "fcrelu_0", "InnerProduct", 2, "weight_data_size", HUGE, MAX_BLOB_ELEMENTS),
    ("cunet", "reshape_22", "Reshape", 2, "c", HUGE, MAX_EXTENT),
    ("cunet", "slice_0", "Crop", 3, "outw", HUGE, MAX_EXTENT),
]


@pytest.mark.parametrize(
    ("model", "layer", "type", "pid", "name", "value", "limit"),
    SIZE_CASES,
    ids=[f"{c[0]}-{c[2]}-{c[3]}-{c[4]}" for c in SIZE_CASES],
)
async def test_size_param_over_its_limit_is_refused_at_load(
    tmp_path: Path,
    use_vulkan: bool,
    model: str,
    layer: str,
    type: str,
    pid: int,
    name: str,
    value: int,
    limit: int,
) -> None:
    param, line = edit_line(tmp_path, model, layer, with_param(pid, value))
    message = (
        f"{param}:{line}, layer '{layer}': {type} param {pid} ({name}) = {value} "
        f"exceeds the limit {limit}"
    )
    with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
        await run_model(model, param, use_vulkan=use_vulkan)
    assert (caught.value.file, caught.value.line, caught.value.layer) == (str(param), line, layer)


@pytest.mark.parametrize(("scale", "limit"), [(1e5, MAX_BLOB_ELEMENTS), (1e7, MAX_EXTENT)])
async def test_blob_over_a_limit_is_a_plan_error_before_allocating(
    use_vulkan: bool, scale: float, limit: int
) -> None:
    """A scale that is a fine number still cannot ask for 5.8e13 floats (1e5: each side is
    4.4 million, the blob too many elements) or a side of 440 million (1e7)."""
    param = tiny_param("Input in0 0 1 in0", f"Interp up 1 1 in0 out0 0=1 1={scale} 2={scale}")
    x = np.zeros((3, 44, 44), np.float32)
    taken = r"layer 'up' \(Interp\) cannot take inputs \[\(3, 44, 44\)\]: "
    with pytest.raises(InputError, match=rf"{taken}.*exceeds the limit {limit}"):
        await run_net(param, b"", {"in0": x}, ["out0"], use_vulkan=use_vulkan)


@pytest.mark.parametrize("scale", ["1e39", "-2.0", "0.0"])
async def test_interp_scale_that_is_not_a_size_is_refused_at_load(scale: str) -> None:
    """1e39 is inf as the float32 ncnn reads; a scale <= 0 has no output."""
    param = tiny_param("Input in0 0 1 in0", f"Interp up 1 1 in0 out0 0=1 1=2.0 2={scale}")
    message = r"<bytes>:4, layer 'up': Interp param 2 \(width_scale\) = .* must be"
    x = np.zeros((1, 4, 4), np.float32)
    with pytest.raises(ModelFormatError, match=message):
        await run_net(param, b"", {"in0": x}, ["out0"], use_vulkan=False)


# Found by the fuzz (a random param or layer type changed in a test model): each ended in a raw
# OverflowError, IndexError or ValueError from deep inside, at load or at run.
def retype(kind: str) -> object:
    return lambda tokens: [kind, *tokens[1:]]


def both(first: object, then: object) -> object:
    return lambda tokens: then(first(tokens))  # type: ignore[operator]


FUZZ_CASES = [
    ("cunet", "convrelu_3", with_param(3, "3e+38"), "param 3 must be a 32-bit int, got 3e+38"),
    ("squeezenet", "cat_0", with_param(0, "-1e+30"), "param 0 must be a 32-bit int"),
    (
        "cunet",
        "convrelu_3",
        with_param(11, 1000),
        "param 6 weight_data_size=9216 is not a positive multiple of num_output x kernel_w x "
        "kernel_h = 96000",
    ),
    ("cunet", "gap_0", both(retype("PReLU"), with_param(0, 0)), "PReLU param 0 (num_slope) = 0"),
    ("cunet", "mul_0", with_param(1, 1), "BinaryOp takes 1 input blob, got 2"),
    ("squeezenet", "maxpool2d_51", with_param(11, "1e+30"), "param 11 must be a 32-bit int"),
]


@pytest.mark.parametrize(
    ("model", "layer", "edit", "message"),
    FUZZ_CASES,
    ids=[f"{i}-{c[0]}-{c[1]}" for i, c in enumerate(FUZZ_CASES)],
)
async def test_malformed_layer_found_by_the_fuzz_is_refused_at_load(
    tmp_path: Path, use_vulkan: bool, model: str, layer: str, edit: object, message: str
) -> None:
    param, line = edit_line(tmp_path, model, layer, edit)
    where = f"{param}:{line}, layer '{layer}': "
    with pytest.raises(ModelFormatError, match=re.escape(where) + ".*" + re.escape(message)):
        await run_model(model, param, use_vulkan=use_vulkan)


# -- blob counts: each layer type states how many bottoms and tops it takes ----------------------


async def test_cunet_binaryop_retyped_as_softmax_is_refused_at_load(
    tmp_path: Path, use_vulkan: bool
) -> None:
    """Softmax is one-blob-only: today it takes the first of two inputs and exits 0."""

    def retype(tokens: list[str]) -> list[str]:
        return ["Softmax", *tokens[1:]]

    param, line = edit_line(tmp_path, "cunet", "add_1", retype)
    message = f"{param}:{line}, layer 'add_1': Softmax takes 1 input blob, got 2"
    with pytest.raises(ModelFormatError, match=re.escape(message)):
        await run_model("cunet", param, use_vulkan=use_vulkan)


COUNT_CASES = [
    ("Softmax s 1 2 a out0 extra", "Softmax gives 1 output blob, got 2"),
    ("ReLU r 2 1 a b out0", "ReLU takes 1 input blob, got 2"),
    ("BinaryOp add 1 1 a out0 0=0", "BinaryOp takes 2 input blobs, got 1"),
    ("BinaryOp add 3 1 a b a out0 0=0", "BinaryOp takes 2 input blobs, got 3"),
    ("BinaryOp add 2 1 a b out0 0=0 1=1 2=1.0", "BinaryOp takes 1 input blob, got 2"),
    ("Concat cat 0 1 out0", "Concat takes at least 1 input blob, got 0"),
    ("Eltwise sum 1 1 a out0 0=1", "Eltwise takes at least 2 input blobs, got 1"),
    ("Split split 1 0 a", "Split gives at least 1 output blob, got 0"),
    ("Slice slice 2 2 a b out0 out1 -23300=2,-233,-233", "Slice takes 1 input blob, got 2"),
    ("Noop noop 1 2 a out0 out1", "Noop gives at most 1 output blob (one per input), got 2"),
    ("Crop crop 1 1 a out0", "Crop takes 2 input blobs, got 1"),
    ("Interp up 1 1 a out0 0=1 5=1", "Interp takes 2 input blobs, got 1"),
    ("Scale scale 1 1 a out0 0=-233", "Scale takes 2 input blobs, got 1"),
    ("Input again 1 1 a out0", "Input takes 0 input blobs, got 1"),
    ("MemoryData data 1 1 a out0 0=1", "MemoryData takes 0 input blobs, got 1"),
]


@pytest.mark.parametrize(
    ("line", "message"),
    COUNT_CASES,
    ids=[f"{i}-{c[0].split()[0]}" for i, c in enumerate(COUNT_CASES)],
)
async def test_layer_given_the_wrong_number_of_blobs_is_refused_at_load(
    line: str, message: str
) -> None:
    param = tiny_param("Input in0 0 1 a", "Input in1 0 1 b", line)
    name = line.split()[1]
    where = f"<bytes>:5, layer '{name}': "
    with pytest.raises(ModelFormatError, match=re.escape(where + message)):
        async with Net(Option(use_vulkan_compute=False)) as net:
            await net.load_param(param)


NEGATIVE_COUNT_CASES = [
    ("BatchNorm bn 1 1 a out0 0=-3", "BatchNorm param 0 (channels) = -3 must be >= 0"),
    ("Scale sc 1 1 a out0 0=-2", "Scale param 0 (scale_data_size) = -2 must be >= 0"),
    ("Bias b 1 1 a out0 0=-1", "Bias param 0 (bias_data_size) = -1 must be >= 0"),
    ("PReLU p 1 1 a out0 0=-4", "PReLU param 0 (num_slope) = -4 must be >= 0"),
]


@pytest.mark.parametrize(("line", "message"), NEGATIVE_COUNT_CASES)
async def test_a_negative_per_channel_count_is_refused_at_load(line: str, message: str) -> None:
    """ncnn would read a negative count of weights: refused with the param named."""
    param = tiny_param("Input in0 0 1 a", "Input in1 0 1 b", line)
    where = f"<bytes>:5, layer '{line.split()[1]}': "
    with pytest.raises(ModelFormatError, match=re.escape(where + message)):
        async with Net(Option(use_vulkan_compute=False)) as net:
            await net.load_param(param)


async def test_noop_with_fewer_tops_passes_its_first_input(
    tmp_path: Path, use_vulkan: bool
) -> None:
    """yolo-fastestv2 ends with ``Noop output 2 1 794 796 output``: ncnn passes input i to
    output i, so the output is the first input."""
    text = (MODELS / "cunet" / "model.param").read_text()
    lines = text.rstrip("\n").split("\n")
    assert lines[1] == "19 21" and lines[-1].split()[:5] == [
        "Convolution",
        "conv_18",
        "1",
        "1",
        "19",
    ]
    lines[1] = "20 22"
    lines[-1] = lines[-1].replace(" 19 out0 ", " 19 conv_out ")
    lines.append("Noop output 2 1 conv_out 18 out0")
    param = tmp_path / "model.param"
    param.write_text("\n".join(lines) + "\n")
    y = await run_model("cunet", param, use_vulkan=use_vulkan)
    ref = np.load(MODELS / "cunet" / "output.npy")
    assert y.shape == ref.shape
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 2e-3


async def test_noop_passes_input_i_to_output_i(use_vulkan: bool) -> None:
    param = tiny_param(
        "Input in0 0 1 in0",
        "Input in1 0 1 in1",
        "ReLU r0 1 1 in0 a",
        "ReLU r1 1 1 in1 b 0=0.5",
        "Noop n 2 2 a b n0 n1",
        "TanH t0 1 1 n0 out0",
        "TanH t1 1 1 n1 out1",
    )
    rng = np.random.default_rng(20)
    x0 = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x1 = rng.standard_normal((2, 3, 4)).astype(np.float32)
    out0, out1 = await run_net(
        param, b"", {"in0": x0, "in1": x1}, ["out0", "out1"], use_vulkan=use_vulkan
    )
    np.testing.assert_allclose(out0, np.tanh(np.maximum(x0, 0)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out1, np.tanh(np.where(x1 < 0, x1 * 0.5, x1)), rtol=1e-5, atol=1e-6)


# -- whatever goes wrong inside, the user sees a ModelFormatError naming where ------------------


async def test_unexpected_error_in_load_param_is_a_model_format_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The safety net: a bug in a layer's parameter code still names the file, line and layer,
    with the bug chained as the cause."""
    from asyncvk.layers.pooling import Pooling

    def broken(self: Pooling, pd: object) -> None:
        raise KeyError("a bug")

    monkeypatch.setattr(Pooling, "load_param", broken)
    param = MODELS / "cunet" / "model.param"
    with pytest.raises(
        ModelFormatError, match=r"model.param:11, layer 'gap_0': .*KeyError"
    ) as caught:
        async with Net(Option(use_vulkan_compute=False)) as net:
            await net.load_param(param)
    assert isinstance(caught.value.__cause__, KeyError)


async def test_unexpected_error_in_load_model_is_a_model_format_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from asyncvk.layers.innerproduct import InnerProduct

    def broken(self: InnerProduct, mb: object) -> None:
        raise IndexError("a bug")

    monkeypatch.setattr(InnerProduct, "load_model", broken)
    d = MODELS / "cunet"
    message = r"model.bin(:12)?, layer 'fcrelu_0': .*IndexError: a bug"
    with pytest.raises(ModelFormatError, match=message) as caught:
        async with Net(Option(use_vulkan_compute=False)) as net:
            await net.load_param(d / "model.param")
            await net.load_model(d / "model.bin")
    assert isinstance(caught.value.__cause__, IndexError)


async def test_unexpected_error_in_a_gpu_layer_is_a_model_format_error(
    device: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from asyncvk.layers.pooling import Pooling

    def broken(self: Pooling, target: object) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(Pooling, "pipeline_specs", broken)
    d = MODELS / "cunet"
    with pytest.raises(
        ModelFormatError, match=r"model.param:11, layer 'gap_0': .*ZeroDivisionError"
    ):
        async with Net(Option(use_vulkan_compute=True)) as net:
            await net.load_param(d / "model.param")
            await net.load_model(d / "model.bin")


# -- NaN: where ncnn's reference layers propagate it, so does asyncvk -----------------------------

# ncnn's scalar semantics, transcribed from src/layer/*.cpp: std::max(a, b) is (a < b) ? b : a
# and std::min(a, b) is (b < a) ? b : a, so a NaN survives only as the first argument.


def std_max(a: float, b: float) -> float:
    return b if a < b else a


def std_min(a: float, b: float) -> float:
    return b if b < a else a


def ref_max_pool(x: np.ndarray, k: int, s: int, pad: int) -> np.ndarray:
    """pooling.cpp: the border is -FLT_MAX; max = window[0], then std::max(max, v) per tap."""
    c, h, w = x.shape
    xb = np.full((c, h + 2 * pad, w + 2 * pad), -FLT_MAX, np.float32)
    xb[:, pad : pad + h, pad : pad + w] = x
    outh, outw = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
    out = np.empty((c, outh, outw), np.float32)
    for q in range(c):
        for i in range(outh):
            for j in range(outw):
                window = xb[q, i * s : i * s + k, j * s : j * s + k].reshape(-1)
                m = window[0]
                for v in window:
                    m = std_max(m, v)
                out[q, i, j] = m
    return out


def ref_global_max(x: np.ndarray) -> np.ndarray:
    out = []
    for plane in x.reshape(x.shape[0], -1):
        m = plane[0]
        for v in plane:
            m = std_max(m, v)
        out.append(m)
    return np.array(out, np.float32)


def ref_reduce_w(x: np.ndarray, op: object, v0: float) -> np.ndarray:
    """reduction.cpp: sum = v0 (-FLT_MAX for max, FLT_MAX for min); sum = op(sum, v)."""
    out = np.empty((*x.shape[:-1], 1), np.float32)
    for idx in np.ndindex(*x.shape[:-1]):
        acc = np.float32(v0)
        for v in x[idx]:
            acc = op(acc, v)  # type: ignore[operator]
        out[(*idx, 0)] = acc
    return out


def ref_softmax_c(x: np.ndarray) -> np.ndarray:
    """softmax.cpp: max from -FLT_MAX by std::max, then exp(x - max) / sum."""
    out = np.empty_like(x)
    for i, j in np.ndindex(*x.shape[1:]):
        m = -FLT_MAX
        for v in x[:, i, j]:
            m = std_max(m, v)
        e = np.exp(x[:, i, j] - m)
        out[:, i, j] = e / e.sum(dtype=np.float32)
    return out


def ref_elementwise(x: np.ndarray, f: object) -> np.ndarray:
    return np.vectorize(f, otypes=[np.float32])(x)  # type: ignore[call-overload,no-any-return]


def ref_relu(slope: float) -> object:
    return lambda v: (np.float32(0) if slope == 0 else v * np.float32(slope)) if v < 0 else v


def ref_clip(lo: float, hi: float) -> object:
    def clip(v: np.float32) -> np.float32:
        if v < lo:
            v = np.float32(lo)
        if v > hi:
            v = np.float32(hi)
        return v

    return clip


def ref_hard(alpha: float, beta: float, swish: bool) -> object:
    lower = np.float32(-np.float32(beta) / np.float32(alpha))
    upper = np.float32(np.float32(1) / np.float32(alpha) + lower)

    def hard(v: np.float32) -> np.float32:
        if v < lower:
            return np.float32(0)
        if v > upper:
            return v if swish else np.float32(1)
        mid = v * np.float32(alpha) + np.float32(beta)
        return v * mid if swish else mid

    return hard


NAN_SHAPE = (4, 8, 10)


def nan_mask() -> np.ndarray:
    """NaN at window starts and inside windows, on borders, and a whole row (an all-NaN
    reduction), zeros elsewhere."""
    mask = np.zeros(NAN_SHAPE, np.float32)
    for q, i, j in [(0, 0, 0), (0, 2, 2), (0, 3, 5), (1, 1, 1), (1, 4, 7), (2, 7, 9), (2, 6, 0)]:
        mask[q, i, j] = np.nan
    mask[3, 5, :] = np.nan
    return mask


NAN_LAYERS = [
    "ReLU relu 1 1 x0 relu",
    "ReLU leaky 1 1 x1 leaky 0=0.1",
    "Clip clip 1 1 x2 clip 0=-0.5 1=0.5",
    "Pooling maxpool 1 1 x3 maxpool 0=0 1=2 2=2",
    "Pooling maxpool_pad 1 1 x4 maxpool_pad 0=0 1=3 2=1 3=1 5=1",
    "Pooling gmax 1 1 x5 gmax 0=0 4=1",
    "Reduction rmax 1 1 x6 rmax 0=4 1=0 -23303=1,-1 4=1 5=1",
    "Reduction rmin 1 1 x7 rmin 0=5 1=0 -23303=1,-1 4=1 5=1",
    "BinaryOp bmax 1 1 x8 bmax 0=4 1=1 2=0.0",
    "BinaryOp bmin 1 1 x9 bmin 0=5 1=1 2=0.0",
    "Eltwise emax 2 1 x10 y0 emax 0=2",
    "Eltwise emax_second 2 1 y1 x11 emax_second 0=2",
    "HardSwish hswish 1 1 x12 hswish",
    "HardSigmoid hsigmoid 1 1 x13 hsigmoid",
    "Softmax softmax 1 1 x14 softmax 0=0",
    "Convolution conv_relu 1 1 x15 conv_relu 0=4 1=1 5=0 6=16 9=1",
]


def nan_model() -> tuple[bytes, bytes]:
    """in0 + a MemoryData blob holding NaNs (the .bin), split into every layer above."""
    branches = len([1 for line in NAN_LAYERS if " x" in line])
    c, h, w = NAN_SHAPE
    xs = " ".join(f"x{i}" for i in range(branches))
    lines = [
        "Input in0 0 1 in0",
        "Split copies 1 3 in0 in0a y0 y1",
        f"MemoryData nan 0 1 nanmask 0={w} 1={h} 2={c}",
        "BinaryOp plant 2 1 in0a nanmask x 0=0",
        f"Split fan 1 {branches} x {xs}",
        *NAN_LAYERS,
    ]
    weights = nan_mask().tobytes() + struct.pack("<I", 0) + np.eye(4, dtype=np.float32).tobytes()
    return tiny_param(*lines), weights


def nan_input() -> np.ndarray:
    return np.random.default_rng(7767517).uniform(-3, 3, NAN_SHAPE).astype(np.float32)


def nan_reference(x: np.ndarray) -> dict[str, np.ndarray]:
    with np.errstate(invalid="ignore"):  # comparisons with NaN are the point here
        return _nan_reference(x)


def _nan_reference(x: np.ndarray) -> dict[str, np.ndarray]:
    planted = x + nan_mask()
    y = x  # the second operand of the Eltwise layers: finite
    conv = np.broadcast_to(np.isnan(planted).any(axis=0), NAN_SHAPE)
    return {
        "relu": ref_elementwise(planted, ref_relu(0.0)),
        "leaky": ref_elementwise(planted, ref_relu(0.1)),
        "clip": ref_elementwise(planted, ref_clip(-0.5, 0.5)),
        "maxpool": ref_max_pool(planted, 2, 2, 0),
        "maxpool_pad": ref_max_pool(planted, 3, 1, 1),
        "gmax": ref_global_max(planted),
        "rmax": ref_reduce_w(planted, std_max, -FLT_MAX),
        "rmin": ref_reduce_w(planted, std_min, FLT_MAX),
        "bmax": ref_elementwise(planted, lambda v: std_max(v, np.float32(0))),
        "bmin": ref_elementwise(planted, lambda v: std_min(v, np.float32(0))),
        "emax": np.vectorize(std_max, otypes=[np.float32])(planted, y),
        "emax_second": np.vectorize(std_max, otypes=[np.float32])(y, planted),
        "hswish": ref_elementwise(planted, ref_hard(0.2, 0.5, True)),
        "hsigmoid": ref_elementwise(planted, ref_hard(0.2, 0.5, False)),
        "softmax": ref_softmax_c(planted),
        # a 1x1 convolution mixes every channel; the fused ReLU is fmaxf(v, 0): NaN -> 0
        "conv_relu": np.where(conv, np.float32(0), np.maximum(planted, 0)),
    }


def test_the_nan_reference_is_not_vacuous() -> None:
    ref = nan_reference(nan_input())
    nan_counts = {name: int(np.isnan(v).sum()) for name, v in ref.items()}
    # NaN survives some layers everywhere, some nowhere, and max pooling only where it
    # starts a window: a NumPy max (any NaN) or a GLSL max (none) gives other counts
    assert nan_counts["relu"] == int(np.isnan(nan_mask()).sum())
    assert nan_counts["conv_relu"] == nan_counts["emax_second"] == 0
    windows_with_nan = np.isnan(nan_mask()).reshape(4, 4, 2, 5, 2).any(axis=(2, 4)).sum()
    assert 0 < nan_counts["maxpool"] < windows_with_nan
    assert nan_counts["rmax"] == nan_counts["rmin"] == 0


@pytest.mark.parametrize("name", [line.split()[1] for line in NAN_LAYERS])
async def test_nan_in_the_weights_comes_out_as_ncnn_gives_it(use_vulkan: bool, name: str) -> None:
    param, weights = nan_model()
    x = nan_input()
    (y,) = await run_net(param, weights, {"in0": x}, [name], use_vulkan=use_vulkan)
    expected = nan_reference(x)[name]
    assert y.shape == expected.shape
    np.testing.assert_array_equal(np.isnan(y), np.isnan(expected), err_msg=f"{name}: NaN where")
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6, equal_nan=True)


async def test_inf_in_the_weights_is_a_value_not_a_warning(use_vulkan: bool) -> None:
    """ncnn's arithmetic is IEEE: inf x 0 is NaN and inf + 1 is inf, never a RuntimeWarning
    (which ``-W error`` would raise out of the CPU path)."""
    param = tiny_param(
        "Input in0 0 1 in0",
        "Convolution conv 1 1 in0 conv 0=2 1=1 6=4",
        "BatchNorm bn 1 1 conv out0 0=2",
    )
    w = np.array([np.inf, 1, 1, -np.inf], np.float32)
    slope_mean_var_bias = np.array([1, 1, 0, 0, 1, 1, 0, 0], np.float32)
    weights = struct.pack("<I", 0) + w.tobytes() + slope_mean_var_bias.tobytes()
    x = np.zeros((2, 3, 3), np.float32)
    x[1] = 1
    (y,) = await run_net(param, weights, {"in0": x}, ["out0"], use_vulkan=use_vulkan)
    assert np.isnan(y[0]).all() and (y[1] == -np.inf).all()


# ncnn's x86 kernels use MAXPS/MINPS, which return the second operand when either is NaN, so the
# wheel keeps a NaN where ncnn's reference layers drop it and the other way round (Clip, max
# pooling, Reduction, Sigmoid all depend on the lane). A NaN that fills a whole channel goes the
# same way through both for Convolution, ReLU and max pooling, so that is what the wheel checks.
_WHEEL_SCRIPT = """
import sys, numpy as np, ncnn
param, model, x_path, out_path, names = sys.argv[1:6]
net = ncnn.Net()
net.opt.use_vulkan_compute = False
assert net.load_param(param) == 0 and net.load_model(model) == 0
x = ncnn.Mat(np.load(x_path)).clone()
results = {}
for name in names.split(","):
    ex = net.create_extractor()
    ex.input("in0", x)
    ret, out = ex.extract(name)
    assert ret == 0, ret
    results[name] = np.array(out.clone()).copy()
np.savez(out_path, **results)
"""


def nan_channel_model() -> tuple[bytes, bytes]:
    rng = np.random.default_rng(20)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    w[5, 1, 1, 1] = np.nan
    b = rng.standard_normal(8).astype(np.float32)
    param = tiny_param(
        "Input in0 0 1 in0",
        "Convolution conv 1 1 in0 conv 0=8 1=3 4=1 5=1 6=216",
        "ReLU relu 1 1 conv relu",
        "Pooling pool 1 1 relu pool 0=0 1=2 2=2",
    )
    return param, struct.pack("<I", 0) + w.tobytes() + b.tobytes()


async def test_nan_channel_matches_the_ncnn_wheel(tmp_path: Path, use_vulkan: bool) -> None:
    pytest.importorskip("ncnn", reason="the ncnn wheel is an optional oracle (pip install ncnn)")
    param, weights = nan_channel_model()
    x = np.random.default_rng(7).standard_normal((3, 12, 14)).astype(np.float32)
    paths = {"param": tmp_path / "m.param", "bin": tmp_path / "m.bin", "x": tmp_path / "x.npy"}
    paths["param"].write_bytes(param)
    paths["bin"].write_bytes(weights)
    np.save(paths["x"], x)
    names = ["conv", "relu", "pool"]
    out = tmp_path / "ncnn.npz"
    # a separate process: the wheel's Python binding can crash its host on misuse
    args = [sys.executable, "-c", _WHEEL_SCRIPT, *map(str, paths.values()), str(out)]
    await asyncio.to_thread(subprocess.run, [*args, ",".join(names)], check=True, timeout=120)
    wheel = np.load(out)
    ours = await run_net(param, weights, {"in0": x}, names, use_vulkan=use_vulkan)
    for name, y in zip(names, ours, strict=True):
        expected = wheel[name].reshape(y.shape)
        assert np.isnan(expected).any(), f"{name}: the planted NaN must reach this blob"
        np.testing.assert_array_equal(np.isnan(y), np.isnan(expected), err_msg=name)
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-5, equal_nan=True)
