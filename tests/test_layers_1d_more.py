"""ConvolutionDepthWise1D, Deconvolution1D and DeconvolutionDepthWise1D against ncnn itself (the
wheel's CPU fp32): the GPU path on lavapipe and the CPU path, over every param that changes the
result (kernel, stride, dilation, pads and the SAME modes, pad value, bias, groups, each fused
activation, output pad and output size) on dims-2 (h = channels, w) and dims-1 blobs; bad params
are a ModelFormatError naming the file, line, layer and param, blobs the layers cannot take an
InputError."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import needs_vulkan
from one_layer_cases import (
    ACTIVATIONS,
    Case,
    check_bad_params,
    check_bad_shape,
    check_matches_ncnn,
)

pytest.importorskip("ncnn")
pytestmark = needs_vulkan


def layer(
    id: str,
    kind: str,
    params: str,
    shape: tuple[int, ...],
    out: int,
    k: int,
    group: int = 1,
    bias: bool = True,
) -> Case:
    """A case of ``kind``: ``shape`` (h, w) or (w,), ``out`` output rows, kernel ``k``."""
    rows = shape[0] if len(shape) == 2 else 1
    size = out * rows // group * k
    grouped = f" 7={group}" if "DepthWise" in kind else ""
    line = f"{kind} 0={out} 1={k} 5={int(bias)} 6={size}{grouped} {params}"
    return Case(id, line.strip(), shape, (size, out) if bias else (size,))


def dw(id: str, params: str, shape: tuple[int, ...], out: int, k: int, g: int) -> Case:
    return layer(id, "ConvolutionDepthWise1D", params, shape, out, k, group=g)


def de(id: str, params: str, shape: tuple[int, ...], out: int, k: int, bias: bool = True) -> Case:
    return layer(id, "Deconvolution1D", params, shape, out, k, bias=bias)


def dedw(id: str, params: str, shape: tuple[int, ...], out: int, k: int, g: int) -> Case:
    return layer(id, "DeconvolutionDepthWise1D", params, shape, out, k, group=g)


CONV_CASES = [
    dw("convdw1d-depthwise", "", (5, 17), 5, 3, 5),
    dw("convdw1d-multiplier", "", (3, 12), 6, 2, 3),
    dw("convdw1d-groups", "", (4, 11), 6, 3, 2),
    dw("convdw1d-group-one", "", (3, 9), 4, 3, 1),
    dw("convdw1d-stride-dilation", "2=2 3=3", (4, 23), 4, 3, 4),
    dw("convdw1d-pads-pad-value", "4=2 15=1 18=-1.5", (3, 10), 3, 4, 3),
    dw("convdw1d-pad-left-only-default-right", "4=3", (2, 7), 2, 5, 2),
    dw("convdw1d-same-upper", "3=2 4=-233 15=-233 18=0.7", (3, 11), 3, 4, 3),
    dw("convdw1d-same-lower", "3=2 4=-234 15=-234 18=0.7", (3, 11), 3, 4, 3),
    *(dw(f"convdw1d-{name}", params, (4, 13), 4, 3, 4) for name, params in ACTIVATIONS.items()),
    Case(
        "convdw1d-dims1",
        "ConvolutionDepthWise1D 0=2 1=3 5=1 6=6 7=1",
        (19,),
        (6, 2),
    ),
]

DECONV_CASES = [
    de("deconv1d-plain", "", (4, 9), 5, 3),
    de("deconv1d-no-bias", "", (3, 7), 2, 2, bias=False),
    de("deconv1d-stride-dilation", "2=2 3=3", (3, 8), 4, 3),
    de("deconv1d-output-pad", "3=2 18=1", (2, 7), 3, 3),
    de("deconv1d-pads-cut", "3=2 4=1 15=2", (3, 6), 2, 4),
    de("deconv1d-pad-left-only-default-right", "3=2 4=1", (3, 6), 2, 3),
    de("deconv1d-output-w-upper", "3=2 4=-233 15=-233 20=12", (3, 6), 2, 4),
    de("deconv1d-output-w-lower", "3=2 4=-234 15=-234 20=12", (3, 6), 2, 4),
    de("deconv1d-same-without-output-w", "3=2 4=-233 15=-233", (3, 6), 2, 4),
    *(de(f"deconv1d-{name}", params, (3, 8), 4, 3) for name, params in ACTIVATIONS.items()),
    Case("deconv1d-dims1", "Deconvolution1D 0=3 1=3 3=2 5=1 6=9", (11,), (9, 3)),
    dedw("deconvdw1d-depthwise", "3=2", (4, 9), 4, 3, 4),
    dedw("deconvdw1d-groups", "2=2 18=1 9=1", (4, 7), 6, 3, 2),
    dedw("deconvdw1d-multiplier", "3=3 4=1", (3, 8), 6, 4, 3),
    dedw("deconvdw1d-output-w", "3=2 4=-234 15=-234 20=15 9=4", (2, 8), 2, 3, 2),
]

CASES = CONV_CASES + DECONV_CASES


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_matches_ncnn(tmp_path: Path, case: Case, gpu: bool) -> None:
    await check_matches_ncnn(tmp_path, case, gpu)


BAD_PARAMS = [
    (
        "ConvolutionDepthWise1D 0=4 1=3 6=12 4=-233 15=2",
        "params 4/15 pads (-233, 2): use values >= 0, or both -233 or both -234",
    ),
    ("ConvolutionDepthWise1D 0=4 1=3 6=12 7=3", "param 7 group=3 must divide num_output"),
    ("ConvolutionDepthWise1D 0=4 1=3 6=12 19=1", "param 19 dynamic_weight"),
    ("ConvolutionDepthWise1D 0=4 1=3 6=12 9=3", "param 10 activation_params needs 2 values"),
    (
        "Deconvolution1D 0=4 1=3 6=12 4=-234 15=0",
        "params 4/15 pads (-234, 0): use values >= 0, or both -233 or both -234",
    ),
    ("Deconvolution1D 0=4 1=3 6=12 20=9", "param 20 output_w needs pads -233 or -234"),
    ("Deconvolution1D 0=4 1=3 6=12 18=-1", "param 18 output_pad_right=-1 must be >= 0"),
    ("Deconvolution1D 0=4 1=3 6=12 28=1", "param 28 dynamic_weight"),
    ("Deconvolution1D 0=4 1=0 6=12", "kernel"),
    ("DeconvolutionDepthWise1D 0=4 1=3 6=12 7=8", "param 7 group=8 must divide num_output"),
    ("DeconvolutionDepthWise1D 0=4 1=3 6=13 7=2", "param 6 weight_data_size=13"),
]


@pytest.mark.parametrize(("layer", "message"), BAD_PARAMS, ids=[b[0] for b in BAD_PARAMS])
async def test_bad_params_name_file_line_layer_and_param(
    tmp_path: Path, layer: str, message: str
) -> None:
    await check_bad_params(tmp_path, layer, message, 12, (1, 8))


BAD_SHAPES = [
    (
        "ConvolutionDepthWise1D 0=4 1=3 6=12 7=4",
        (4, 2, 8),
        "ConvolutionDepthWise1D takes a dims 1 or 2 blob (h, w), got shape (4, 2, 8)",
    ),
    ("ConvolutionDepthWise1D 0=4 1=3 6=12 7=4", (2, 8), "2 input channels do not split into 4"),
    ("ConvolutionDepthWise1D 0=4 1=3 6=12 7=4", (4, 2), "is smaller than the kernel"),
    (
        "Deconvolution1D 0=4 1=3 6=12",
        (1, 2, 3, 4),
        "Deconvolution1D takes a dims 1 or 2 blob (h, w), got shape (1, 2, 3, 4)",
    ),
    ("Deconvolution1D 0=4 1=3 6=12", (3, 5), "expects 1 input channels, got 3"),
    ("Deconvolution1D 0=4 1=3 6=12 4=-233 15=-233 20=9", (1, 2), "exceed the full"),
    ("DeconvolutionDepthWise1D 0=4 1=3 6=12 7=2 4=3", (2, 1), "pads cut the whole"),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize(("layer", "shape", "message"), BAD_SHAPES, ids=[b[2] for b in BAD_SHAPES])
async def test_a_blob_the_layer_cannot_take_is_an_input_error(
    tmp_path: Path, layer: str, shape: tuple[int, ...], message: str, gpu: bool
) -> None:
    await check_bad_shape(tmp_path, layer, shape, message, gpu)
