"""Convolution3D, ConvolutionDepthWise3D, Deconvolution3D, DeconvolutionDepthWise3D and
Pooling3D against ncnn itself (the wheel's CPU fp32): the GPU path on lavapipe and the CPU path,
over every param that changes the result (per-axis kernels, strides, dilations and pads, the
SAME modes, bias, groups, each fused activation, output pads and sizes, each pooling mode) on
odd-sized dims-4 blobs; bad params are a ModelFormatError naming the file, line, layer and
param, blobs the layers cannot take an InputError."""

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

Dims = tuple[int, int, int]


def conv(
    id: str,
    kind: str,
    params: str,
    shape: tuple[int, int, int, int],
    out: int,
    kernel: Dims,
    group: int = 1,
    bias: bool = True,
) -> Case:
    """A case of a 3-D convolution type: ``kernel`` is (w, h, d), ``out`` output channels."""
    kw, kh, kd = kernel
    size = out * shape[0] // group * kw * kh * kd
    grouped = f" 7={group}" if "DepthWise" in kind else ""
    line = f"{kind} 0={out} 1={kw} 11={kh} 21={kd} 5={int(bias)} 6={size}{grouped} {params}"
    return Case(id, line.strip(), shape, (size, out) if bias else (size,))


def c3(
    id: str, params: str, shape: tuple[int, int, int, int], out: int, k: Dims, **kw: int
) -> Case:
    return conv(id, "Convolution3D", params, shape, out, k, **kw)


def dw3(id: str, params: str, shape: tuple[int, int, int, int], out: int, k: Dims, g: int) -> Case:
    return conv(id, "ConvolutionDepthWise3D", params, shape, out, k, group=g)


def d3(
    id: str, params: str, shape: tuple[int, int, int, int], out: int, k: Dims, **kw: int
) -> Case:
    return conv(id, "Deconvolution3D", params, shape, out, k, **kw)


def ddw3(id: str, params: str, shape: tuple[int, int, int, int], out: int, k: Dims, g: int) -> Case:
    return conv(id, "DeconvolutionDepthWise3D", params, shape, out, k, group=g)


CONV_CASES = [
    c3("conv3d-cube", "", (3, 5, 6, 7), 4, (3, 3, 3)),
    c3("conv3d-1x1x1-no-bias", "", (5, 3, 4, 5), 6, (1, 1, 1), bias=0),
    c3("conv3d-per-axis-kernel", "", (2, 4, 7, 9), 3, (3, 2, 1)),
    c3("conv3d-kernel-d-only", "", (2, 5, 3, 4), 3, (1, 1, 3)),
    c3("conv3d-strides", "3=2 13=1 23=3", (3, 7, 6, 9), 2, (2, 3, 2)),
    c3("conv3d-stride-default-follows-w", "3=2", (2, 7, 7, 7), 3, (3, 3, 3)),
    c3("conv3d-dilations", "2=2 12=1 22=2", (2, 7, 5, 9), 3, (3, 2, 2)),
    c3("conv3d-pads-per-axis", "4=1 15=2 14=0 16=1 24=2 17=0 18=0.5", (2, 3, 4, 5), 3, (3, 3, 2)),
    c3("conv3d-pad-defaults-follow-left", "4=1", (2, 3, 4, 5), 3, (3, 3, 3)),
    c3("conv3d-same-upper", "3=2 4=-233 18=0.7", (2, 5, 6, 7), 3, (3, 4, 2)),
    c3("conv3d-same-lower", "3=2 4=-234 18=0.7", (2, 5, 6, 7), 3, (3, 4, 2)),
    c3("conv3d-same-lower-odd-depth", "4=-234 23=1 3=1 18=-1", (2, 5, 4, 6), 2, (3, 3, 4)),
    c3("conv3d-same-dilated", "2=2 22=1 4=-233", (2, 4, 5, 9), 2, (3, 2, 3)),
    c3("conv3d-same-negative-trailing", "3=2 13=1 23=1 4=-233", (2, 3, 5, 6), 3, (1, 3, 1)),
    *(
        c3(f"conv3d-{name}", params, (3, 3, 4, 5), 4, (2, 3, 2))
        for name, params in ACTIVATIONS.items()
    ),
    dw3("convdw3d-depthwise", "", (4, 5, 6, 7), 4, (3, 3, 3), 4),
    dw3("convdw3d-multiplier", "3=2 4=1", (3, 4, 5, 6), 6, (3, 2, 2), 3),
    dw3("convdw3d-groups", "2=2 22=1 9=2 -23310=1,0.2", (4, 4, 5, 9), 6, (3, 2, 1), 2),
    dw3("convdw3d-group-one", "4=-233", (3, 3, 4, 5), 2, (2, 2, 2), 1),
]

DECONV_CASES = [
    d3("deconv3d-cube", "", (3, 3, 4, 5), 4, (3, 3, 3)),
    d3("deconv3d-stride2-no-bias", "3=2", (2, 3, 3, 4), 3, (2, 2, 2), bias=0),
    d3("deconv3d-per-axis", "3=1 13=2 23=3 2=2 12=1 22=1", (2, 3, 4, 5), 3, (3, 2, 2)),
    d3("deconv3d-output-pads", "3=2 18=1 19=0 20=1", (2, 3, 3, 4), 2, (3, 3, 3)),
    d3("deconv3d-output-pad-defaults", "3=2 18=1", (2, 2, 3, 3), 2, (3, 3, 3)),
    d3("deconv3d-pads-cut", "3=2 4=1 15=0 14=2 16=1 24=1 17=2", (2, 3, 4, 4), 3, (3, 3, 3)),
    d3("deconv3d-output-size-upper", "3=2 4=-233 25=8 26=7 27=6", (2, 3, 4, 4), 2, (3, 3, 3)),
    d3("deconv3d-output-size-lower", "3=2 4=-234 25=8 26=7 27=6", (2, 3, 4, 4), 2, (3, 3, 3)),
    d3("deconv3d-output-size-defaults", "3=2 4=-233 25=7", (2, 3, 4, 4), 2, (3, 3, 3)),
    d3("deconv3d-same-without-size", "3=2 4=-233", (2, 3, 3, 3), 2, (2, 2, 2)),
    *(
        d3(f"deconv3d-{name}", f"3=2 {params}", (2, 2, 3, 3), 3, (3, 2, 2))
        for name, params in ACTIVATIONS.items()
    ),
    ddw3("deconvdw3d-depthwise", "3=2", (4, 3, 4, 5), 4, (3, 3, 3), 4),
    ddw3("deconvdw3d-groups", "3=2 13=1 4=1 9=1", (4, 3, 3, 4), 6, (2, 3, 2), 2),
    ddw3("deconvdw3d-multiplier", "2=2 18=1", (3, 2, 3, 3), 6, (2, 2, 2), 3),
]


def pool(id: str, params: str, shape: tuple[int, int, int, int]) -> Case:
    return Case(id, f"Pooling3D {params}".strip(), shape)


POOL_CASES = [
    pool("pool3d-max", "0=0 1=2 2=2", (3, 4, 6, 8)),
    pool("pool3d-max-per-axis", "0=0 1=3 11=2 21=1 2=2 12=1 22=1", (2, 3, 5, 7)),
    pool("pool3d-max-pads", "0=0 1=3 2=2 3=1 14=0 13=1 15=1 23=0 16=1", (2, 5, 5, 6)),
    pool("pool3d-max-full-tail", "0=0 1=3 2=2", (2, 6, 7, 8)),
    pool("pool3d-max-valid", "0=0 1=2 2=2 5=1", (2, 5, 7, 9)),
    pool("pool3d-max-same-upper", "0=0 1=3 2=2 5=2", (2, 5, 6, 7)),
    pool("pool3d-max-same-lower", "0=0 1=4 2=3 5=3", (2, 5, 7, 8)),
    pool("pool3d-avg-full-tail", "0=1 1=3 2=2 3=1", (3, 5, 6, 7)),
    pool("pool3d-avg-include-pad", "0=1 1=3 2=2 3=1 6=1", (3, 5, 6, 7)),
    pool("pool3d-avg-valid", "0=1 1=3 11=2 21=2 2=2 5=1 3=1 14=0 23=1", (2, 5, 6, 7)),
    pool("pool3d-avg-same-upper", "0=1 1=4 2=2 5=2", (2, 5, 6, 7)),
    pool("pool3d-avg-same-lower", "0=1 1=3 21=4 2=2 5=3", (2, 5, 6, 7)),
    pool("pool3d-global-max", "0=0 4=1", (5, 3, 4, 5)),
    pool("pool3d-global-avg", "0=1 4=1", (5, 3, 4, 5)),
    pool("pool3d-adaptive-avg", "0=1 7=1 8=3 18=2 28=2", (3, 5, 7, 8)),
    pool("pool3d-adaptive-max-up", "0=0 7=1 8=7 18=5 28=4", (2, 3, 4, 5)),
    pool("pool3d-adaptive-keep-axis", "0=1 7=1 8=-233 18=3 28=1", (2, 4, 5, 6)),
    pool("pool3d-adaptive-identity", "0=0 7=1 8=6 18=5 28=4", (2, 4, 5, 6)),
]

CASES = CONV_CASES + DECONV_CASES + POOL_CASES


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_matches_ncnn(tmp_path: Path, case: Case, gpu: bool) -> None:
    await check_matches_ncnn(tmp_path, case, gpu)


BAD_PARAMS = [
    (
        "Convolution3D 0=2 1=3 6=54 4=-233 15=1",
        "params 4/15/14/16/24/17 pads (-233, 1, -233, -233, -233, -233): use values >= 0, "
        "or all -233 or all -234",
    ),
    ("Convolution3D 0=0 1=3 6=54", "param 0 num_output=0 must be > 0"),
    ("Convolution3D 0=2 1=3 21=0 6=54", "params 1/11/21 kernel (w, h, d) (3, 3, 0) must be > 0"),
    ("Convolution3D 0=2 1=3 23=0 6=54", "params 2/12/22 dilation and 3/13/23 stride must be > 0"),
    ("Convolution3D 0=2 1=3 6=55", "param 6 weight_data_size=55 is not a positive multiple"),
    ("Convolution3D 0=2 1=3 6=54 9=7", "param 9 activation_type=7 is not supported"),
    ("Convolution3D 0=2 1=3 6=54 9=2", "param 10 activation_params needs 1 values"),
    ("ConvolutionDepthWise3D 0=2 1=3 7=3 6=54", "param 7 group=3 must divide num_output"),
    ("Deconvolution3D 0=2 1=3 6=54 19=-1", "params 18/19/20 output_pad must be >= 0"),
    ("Deconvolution3D 0=2 1=3 6=54 25=5", "params 25/26/27 output_w/h/d need pads -233 or -234"),
    ("Pooling3D 0=2 1=2", "param 0 pooling_type=2 must be 0 (max) or 1 (avg)"),
    ("Pooling3D 1=2 21=0", "params 1/11/21 kernel (w, h, d) (2, 2, 0) must be > 0"),
    ("Pooling3D 1=2 22=0", "params 2/12/22 stride must be > 0"),
    ("Pooling3D 1=2 5=4", "param 5 pad_mode=4 must be 0..3"),
    ("Pooling3D 1=2 23=-1", "params 3/14/13/15/23/16 pads must be >= 0"),
    ("Pooling3D 7=1 8=3 28=0", "param 28 adaptive output size 0 must be > 0 or -233"),
]


@pytest.mark.parametrize(("layer", "message"), BAD_PARAMS, ids=[b[0] for b in BAD_PARAMS])
async def test_bad_params_name_file_line_layer_and_param(
    tmp_path: Path, layer: str, message: str
) -> None:
    await check_bad_params(tmp_path, layer, message, 54, (1, 3, 3, 3))


BAD_SHAPES = [
    (
        "Convolution3D 0=2 1=3 6=54",
        (2, 4, 5),
        "Convolution3D takes a dims 4 blob (c, d, h, w), got shape (2, 4, 5)",
    ),
    ("Convolution3D 0=2 1=3 6=54", (3, 3, 3, 3), "expects 1 input channels, got 3"),
    ("Convolution3D 0=2 1=3 6=54", (1, 2, 4, 4), "is smaller than the kernel"),
    (
        # SAME_LOWER puts the -1 of w's total first: ncnn's border does not crop that
        "Convolution3D 0=2 1=1 11=3 21=3 3=2 13=1 23=1 4=-234 6=18",
        (1, 3, 4, 6),
        "SAME padding gives a negative leading pad (-1) on axis w",
    ),
    ("Deconvolution3D 0=2 1=3 6=54 4=-233 25=9", (1, 2, 2, 2), "exceed the full deconvolution"),
    ("Deconvolution3D 0=2 1=3 6=54 4=2", (1, 1, 1, 1), "pads cut the whole"),
    ("Pooling3D 1=2", (2, 3, 4), "Pooling3D takes a dims 4 blob (c, d, h, w), got shape (2, 3, 4)"),
    ("Pooling3D 1=3 5=1", (2, 2, 4, 4), "is smaller than the kernel"),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize(("layer", "shape", "message"), BAD_SHAPES, ids=[b[2] for b in BAD_SHAPES])
async def test_a_blob_the_layer_cannot_take_is_an_input_error(
    tmp_path: Path, layer: str, shape: tuple[int, ...], message: str, gpu: bool
) -> None:
    await check_bad_shape(tmp_path, layer, shape, message, gpu)
