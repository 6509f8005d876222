"""Every GPU layer against its numpy reference, through a one-layer Net, over shapes and params
that reach every code path (odd sizes, channels not divisible by 4, every param variant)."""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field

import numpy as np
import pytest

from asyncvk.gpu import VulkanDevice
from asyncvk.gpu._info import GpuInfo
from asyncvk.gpu._shader_choices import Place, ShaderChoices
from asyncvk.net._dispatch_profile import DispatchTiming, ProfilingExtractor
from asyncvk.net._net import Net
from asyncvk.net._option import Option

RNG = np.random.default_rng(7767517)


@dataclass
class Case:
    type: str
    params: str
    inputs: list[tuple[int, ...]]
    weights: list[tuple[int, int]] = field(default_factory=list)  # (count, ncnn load type)
    tops: int = 1
    positive: bool = False
    unit: bool = False  # inputs inside (-0.9, 0.9), where asin/acos are well conditioned
    gpu_expected: bool = True

    @property
    def id(self) -> str:
        shapes = "+".join("x".join(map(str, s)) for s in self.inputs)
        return f"{self.type}[{self.params or '-'}][{shapes}]"


def build(case: Case) -> tuple[bytes, bytes]:
    n_in = len(case.inputs)
    lines = [f"Input in{i} 0 1 in{i}" for i in range(n_in)]
    bottoms = " ".join(f"in{i}" for i in range(n_in))
    tops = " ".join(f"out{i}" for i in range(case.tops))
    lines.append(f"{case.type} layer {n_in} {case.tops} {bottoms} {tops} {case.params}")
    param = f"7767517\n{len(lines)} {n_in + case.tops}\n" + "\n".join(lines) + "\n"
    weights = b""
    for count, kind in case.weights:
        data = RNG.standard_normal(count).astype(np.float32)
        if case.type == "BatchNorm":
            data = np.abs(data) + 0.5  # the variance must be positive
        weights += (struct.pack("<I", 0) if kind == 0 else b"") + data.tobytes()
    return param.encode(), weights


def conv_weights(
    cout: int, cin: int, k: int, group: int = 1, bias: bool = True
) -> list[tuple[int, int]]:
    w = [(cout * (cin // group) * k * k, 0)]
    return w + ([(cout, 1)] if bias else [])


CASES: list[Case] = [
    # convolution family
    Case("Convolution", "0=7 1=3 4=1 5=1 6=315 9=1", [(5, 9, 11)], conv_weights(7, 5, 3)),
    Case(
        "Convolution",
        "0=6 1=3 2=2 3=2 5=1 6=270 9=2 -23310=1,0.1",
        [(5, 13, 10)],
        conv_weights(6, 5, 3),
    ),
    Case(
        "Convolution",
        "0=4 1=5 3=2 4=-233 5=1 6=300 9=3 -23310=2,-0.5,0.5",
        [(3, 11, 9)],
        conv_weights(4, 3, 5),
    ),
    Case(
        "Convolution",
        "0=4 1=3 4=1 15=2 14=0 16=1 5=0 6=108 9=4",
        [(3, 7, 8)],
        conv_weights(4, 3, 3, bias=False),
    ),
    Case("Convolution", "0=5 1=1 5=1 6=15 9=5", [(3, 6, 6)], conv_weights(5, 3, 1)),
    Case(
        "Convolution",
        "0=5 1=3 4=1 18=0.5 5=1 6=45 9=6 -23310=2,0.2,0.5",
        [(1, 5, 5)],
        conv_weights(5, 1, 3),
    ),
    Case(
        "Convolution",
        "0=3 1=2 11=3 3=1 13=2 4=-234 5=1 6=36",
        [(2, 8, 7)],
        [(3 * 2 * 2 * 3, 0), (3, 1)],
    ),
    # more than one 8-channel tile and one workgroup in the tiled shader, whose 4-column blocks
    # run row-major along x: rows of a partial block (37) and of whole ones (16)
    Case("Convolution", "0=17 1=3 4=1 5=1 6=1377 9=1", [(9, 5, 37)], conv_weights(17, 9, 3)),
    Case("Convolution", "0=10 1=3 4=1 5=1 6=540 9=1", [(6, 7, 16)], conv_weights(10, 6, 3)),
    Case("Convolution", "0=16 1=1 3=2 5=0 6=64", [(4, 3, 67)], conv_weights(16, 4, 1, bias=False)),
    # the tiled shader's per-tap loads (a row span of 8 x stride 4 is more loads than 3 taps),
    # with padding on both sides, and for a padded 1x1 kernel
    Case("Convolution", "0=6 1=3 3=4 4=1 5=1 6=216 9=1", [(4, 9, 21)], conv_weights(6, 4, 3)),
    Case("Convolution", "0=9 1=1 4=1 5=1 6=45", [(5, 6, 7)], conv_weights(9, 5, 1)),
    # more than one 64 x 64 tile of the GEMM shader, taps not a multiple of its 16-tap step
    Case("Convolution", "0=70 1=3 4=1 5=1 6=12600 9=1", [(20, 12, 11)], conv_weights(70, 20, 3)),
    # Winograd on CPU devices (16 channels in and out): SAME padding, two 8-tile blocks, three
    # 8-channel blocks, partial 4x4 tiles at the bottom and right
    Case(
        "Convolution",
        "0=24 1=3 4=-234 5=1 6=3456 9=2 -23310=1,0.1",
        [(16, 9, 14)],
        conv_weights(24, 16, 3),
    ),
    # ... and a map of 81 tiles (11 blocks of 8: the GEMM pass's lanes over tile blocks only)
    Case("Convolution", "0=16 1=3 4=1 5=1 6=2304 9=1", [(16, 34, 36)], conv_weights(16, 16, 3)),
    # ... and 13 channels in, 12 out (a partial 8-channel block), 96 padded tiles (12 blocks),
    # bias and an activation
    Case(
        "Convolution",
        "0=12 1=3 4=1 5=1 6=1404 9=2 -23310=1,0.1",
        [(13, 40, 36)],
        conv_weights(12, 13, 3),
    ),
    Case(
        "Convolution",
        "0=65 1=3 2=2 3=2 4=2 5=0 6=2925 18=0.5",
        [(5, 19, 23)],
        conv_weights(65, 5, 3, bias=False),
    ),
    # pure depthwise (convolutiondepthwise.comp): strides, dilation, 5x5, SAME and asymmetric
    # pads, pad value, activations, a row wider than one 32-column workgroup
    Case(
        "ConvolutionDepthWise",
        "0=5 1=3 3=2 4=1 5=1 6=45 7=5 9=2 -23310=1,0.1",
        [(5, 9, 38)],
        conv_weights(5, 5, 3, group=5),
    ),
    Case(
        "ConvolutionDepthWise",
        "0=3 1=5 2=2 4=-233 5=0 6=75 7=3 9=3 -23310=2,-0.5,0.5",
        [(3, 11, 13)],
        conv_weights(3, 3, 5, group=3, bias=False),
    ),
    Case(
        "ConvolutionDepthWise",
        "0=4 1=3 11=2 3=1 13=2 4=2 15=0 14=1 16=0 18=0.25 5=1 6=24 7=4",
        [(4, 7, 5)],
        [(4 * 3 * 2, 0), (4, 1)],
    ),
    # group 1 through ConvolutionDepthWise takes the tiled path too
    Case("ConvolutionDepthWise", "0=9 1=3 4=1 5=1 6=81 7=1", [(1, 6, 7)], conv_weights(9, 1, 3)),
    Case(
        "ConvolutionDepthWise",
        "0=6 1=3 4=1 5=1 6=54 7=6 9=1",
        [(6, 8, 9)],
        conv_weights(6, 6, 3, group=6),
    ),
    Case(
        "ConvolutionDepthWise",
        "0=6 1=3 3=2 5=1 6=108 7=2",
        [(4, 9, 9)],
        conv_weights(6, 4, 3, group=2),
    ),
    # grouped layers through the tiled shader on CPU devices: shufflenet's grouped 1x1 (20
    # channels a group, not a multiple of its 8), and a padded, strided 3x3 with 4 a group
    Case(
        "ConvolutionDepthWise",
        "0=60 1=1 5=1 6=1200 7=3 9=1",
        [(60, 5, 9)],
        conv_weights(60, 60, 1, group=3),
    ),
    Case(
        "ConvolutionDepthWise",
        "0=8 1=3 3=2 4=1 5=1 6=216 7=2 9=2 -23310=1,0.1",
        [(6, 9, 10)],
        conv_weights(8, 6, 3, group=2),
    ),
    Case("Deconvolution", "0=5 1=3 3=2 4=1 18=1 5=1 6=135 9=1", [(3, 5, 6)], conv_weights(5, 3, 3)),
    Case("Deconvolution", "0=4 1=2 3=2 5=1 6=48", [(3, 4, 5)], conv_weights(4, 3, 2)),
    Case(
        "Deconvolution", "0=3 1=3 2=2 3=1 5=0 6=162", [(6, 4, 4)], conv_weights(3, 6, 3, bias=False)
    ),
    # deconvolution_tiled.comp's phases: stride = kernel (cunet's), stride > kernel (outputs no
    # tap reaches), unequal strides and kernel sides with pads and output_pad, stride 1, a SAME
    # crop of odd offset, more than 8 channels and more than one workgroup
    Case(
        "Deconvolution",
        "0=10 1=2 3=2 5=1 6=480 9=2 -23310=1,0.1",
        [(12, 7, 9)],
        conv_weights(10, 12, 2),
    ),
    Case("Deconvolution", "0=9 1=2 3=3 5=1 6=108", [(3, 5, 6)], conv_weights(9, 3, 2)),
    Case(
        "Deconvolution",
        "0=5 1=5 11=3 3=2 13=3 4=2 14=1 15=1 16=0 18=1 5=1 6=300",
        [(4, 6, 7)],
        [(5 * 4 * 5 * 3, 0), (5, 1)],
    ),
    Case(
        "Deconvolution",
        "0=9 1=3 3=1 4=1 5=0 6=486",
        [(6, 5, 11)],
        conv_weights(9, 6, 3, bias=False),
    ),
    Case(
        "Deconvolution",
        "0=4 1=4 3=2 4=-233 20=10 21=9 5=1 6=128",
        [(2, 5, 5)],
        conv_weights(4, 2, 4),
    ),
    Case("DeconvolutionDepthWise", "0=4 1=3 3=2 5=1 6=108 7=1", [(3, 4, 5)], conv_weights(4, 3, 3)),
    Case(
        "DeconvolutionDepthWise",
        "0=4 1=3 3=2 4=1 5=1 6=36 7=4",
        [(4, 5, 5)],
        conv_weights(4, 4, 3, group=4),
    ),
    Case("InnerProduct", "0=10 1=1 2=630 9=1", [(7, 3, 3)], [(630, 0), (10, 1)]),
    Case("InnerProduct", "0=3 1=0 2=21 9=4", [(7,)], [(21, 0)]),
    # pooling
    Case("Pooling", "0=0 1=3 2=2", [(3, 10, 11)]),
    Case("Pooling", "0=0 1=3 2=2 5=1", [(3, 10, 11)]),
    Case("Pooling", "0=1 1=3 2=2 3=1 6=0", [(5, 9, 8)]),
    Case("Pooling", "0=1 1=3 2=2 3=1 6=1", [(5, 9, 8)]),
    Case("Pooling", "0=1 1=2 2=2 5=2", [(2, 7, 9)]),
    Case("Pooling", "0=0 1=3 2=2 5=3", [(2, 7, 9)]),
    Case("Pooling", "0=0 4=1", [(6, 5, 7)]),
    Case("Pooling", "0=1 4=1", [(6, 5, 7)]),
    Case("Pooling", "0=1 7=1 8=3 18=2", [(3, 8, 7)]),
    # per-channel affine
    Case("BatchNorm", "0=5 1=0.001", [(5, 4, 6)], [(5, 1), (5, 1), (5, 1), (5, 1)]),
    Case("Scale", "0=5 1=1", [(5, 3, 3)], [(5, 1), (5, 1)]),
    Case("Bias", "0=4", [(4, 3, 5)], [(4, 1)]),
    Case("PReLU", "0=4", [(4, 3, 5)], [(4, 1)]),
    Case("PReLU", "0=1", [(3, 3, 5)], [(1, 1)]),
    # activations
    *[
        Case(t, p, [(3, 5, 7)])
        for t, p in [
            ("ReLU", ""),
            ("ReLU", "0=0.1"),
            ("Clip", "0=-0.5 1=0.7"),
            ("Sigmoid", ""),
            ("TanH", ""),
            ("Swish", ""),
            ("HardSigmoid", "0=0.3 1=0.4"),
            ("HardSwish", ""),
            ("Mish", ""),
            ("ELU", "0=0.7"),
            ("GELU", ""),
            ("GELU", "0=1"),
            ("Dropout", "0=0.5"),
            ("Dropout", ""),
            ("Noop", ""),
        ]
    ],
    *[
        Case("UnaryOp", f"0={op}", [(2, 3, 5)], positive=op in (5, 6, 8, 17), unit=op in (12, 13))
        for op in range(20)
    ],
    # binary
    *[
        Case("BinaryOp", f"0={op}", [(3, 4, 5), (3, 4, 5)], positive=op in (6, 9))
        for op in range(12)
    ],
    Case("BinaryOp", "0=2", [(4, 5, 6), (4,)]),
    Case("BinaryOp", "0=0", [(4, 5, 6), (6,)]),
    Case("BinaryOp", "0=1", [(4, 5, 6), (4, 1, 1)]),
    Case("BinaryOp", "0=0", [(4, 5, 6), (1, 5, 6)]),
    Case("BinaryOp", "0=3", [(4, 5, 6), (4, 5)], positive=True),
    Case("BinaryOp", "0=0", [(5, 6), (6,)]),
    Case("BinaryOp", "0=7 1=1 2=0.5", [(3, 4, 5)]),
    Case("Eltwise", "0=1 -23301=3,0.5,-1.0,2.0", [(3, 4, 5)] * 3),
    Case("Eltwise", "0=0", [(3, 4, 5)] * 2),
    Case("Eltwise", "0=2", [(3, 4, 5)] * 3),
    # data movement
    Case("Concat", "0=0", [(3, 4, 5), (2, 4, 5)]),
    Case("Concat", "0=1", [(3, 4, 5), (3, 2, 5), (3, 1, 5)]),
    Case("Concat", "0=-1", [(3, 4, 5), (3, 4, 2)]),
    Case("Concat", "0=0", [(1 + i % 3, 4, 5) for i in range(9)]),  # beyond 8: scatter path
    Case("Concat", "0=1", [(2, 1 + i, 3) for i in range(8)]),
    Case("Split", "", [(3, 4, 5)], tops=2),
    Case("Slice", "-23300=2,-233,-233 1=0", [(6, 4, 5)], tops=2),
    Case("Slice", "-23300=3,1,2,-233 1=2", [(3, 4, 7)], tops=3),
    Case("Crop", "0=1 1=2 2=1 3=3 4=2 5=2", [(4, 6, 7)]),
    Case("Crop", "-23309=2,1,2 -23310=2,-1,-2 -23311=2,1,2", [(3, 7, 8)]),
    Case("Padding", "0=1 1=2 2=3 3=1 4=0 5=0.5", [(2, 4, 5)]),
    Case("Padding", "0=2 1=1 2=1 3=2 4=1", [(2, 4, 5)]),
    Case("Padding", "0=2 1=1 2=1 3=2 4=2", [(2, 4, 5)]),
    Case("Reshape", "0=-1 1=4", [(2, 4, 5)]),
    Case("Flatten", "", [(2, 4, 5)]),
    *[Case("Permute", f"0={t}", [(3, 4, 5)]) for t in range(6)],
    Case("ShuffleChannel", "0=2", [(6, 3, 4)]),
    Case("ShuffleChannel", "0=3 1=1", [(6, 3, 4)]),
    Case("PixelShuffle", "0=2", [(8, 3, 4)]),
    Case("Interp", "0=1 1=2.0 2=2.0", [(3, 5, 6)]),
    Case("Interp", "0=2 3=7 4=9", [(3, 5, 6)]),
    Case("Interp", "0=2 3=7 4=9 6=1", [(3, 5, 6)]),
    Case("Interp", "0=3 1=2.0 2=2.0", [(2, 5, 6)]),
    Case("Interp", "0=3 3=4 4=3 6=1", [(2, 5, 6)]),
    Case("Softmax", "0=0", [(4, 3, 5)]),
    Case("Softmax", "0=2 1=1", [(4, 3, 5)]),
    Case("Softmax", "0=1 1=1", [(4, 3, 5)]),
    Case("Reduction", "0=3 1=0 -23303=2,1,2 4=0 5=1", [(4, 3, 5)]),
    Case("Reduction", "0=3 1=0 -23303=2,1,2 4=1 5=1", [(4, 3, 5)]),
    *[
        Case("Reduction", f"0={op} 1=1 2=0.5", [(3, 4, 5)], positive=op in (9, 10))
        for op in range(11)
    ],
]


#: Winograd's largest error over the output's largest magnitude: the cases below with 12 random
#: inputs each reached 5.8e-6 on lavapipe (2026-11-27; 3.4e-6 failed a 3e-6 bound in CI)
WINOGRAD_ERROR = 1e-5


def assert_close(got: np.ndarray, expected: np.ndarray, of_scale: float = 3e-6) -> None:
    """Within 1e-4 relative, plus an absolute 2e-5 or ``of_scale`` of the output's largest
    magnitude, whichever is more: Winograd F(4x4, 3x3) adds and subtracts terms up to 8x a
    value before its outputs come out, so its fp32 rounding scales with the map's magnitude,
    not with each output's (WINOGRAD_ERROR; the direct shaders' error is within 1e-6 of that
    same scale)."""
    scale = float(np.max(np.abs(expected), initial=0.0))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=max(2e-5, of_scale * scale))


async def _run(
    case: Case,
    gpu: bool,
    inputs: list[np.ndarray],
    param: bytes,
    weights: bytes,
    choices: ShaderChoices | None = None,
) -> tuple[list[np.ndarray], Net]:
    net = Net(Option(use_vulkan_compute=gpu, shader_choices=choices))
    await net.load_param(param)
    await net.load_model(weights)
    await net.background_builds()  # plans as the model settles (the GEMM pipelines adopted)
    outs = []
    for t in range(case.tops):
        ex = net.create_extractor()
        for i, x in enumerate(inputs):
            ex.input(f"in{i}", x)
        outs.append(await ex.extract(f"out{t}"))
    return outs, net


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_gpu_matches_reference(device: VulkanDevice, case: Case) -> None:
    param, weights = build(case)
    inputs = []
    for shape in case.inputs:
        x = RNG.standard_normal(shape).astype(np.float32)
        if case.unit:
            x = RNG.uniform(-0.9, 0.9, shape).astype(np.float32)
        inputs.append(np.abs(x) + 0.1 if case.positive else x)
    expected, cpu_net = await _run(case, False, inputs, param, weights)
    await cpu_net.aclose()
    got, gpu_net = await _run(case, True, inputs, param, weights)
    try:
        plans = [p for ps in gpu_net._plans.values() for p in ps]
        if case.gpu_expected:
            assert all(p.cpu_layer_count == 0 for p in plans), "fell back to the CPU"
    finally:
        await gpu_net.aclose()
    for e, g in zip(expected, got, strict=True):
        assert e.shape == g.shape
        assert_close(g, e)


async def _shaders_against_reference(
    case: Case, of_scale: float = 3e-6, choices: ShaderChoices | None = None
) -> tuple[list[np.ndarray], list[DispatchTiming]]:
    """Run ``case`` on the CPU path and on the GPU, check the GPU's outputs against the CPU's,
    and give the reference outputs and the dispatches of one profiled GPU run (which shaders,
    which groups: the layout a test forced)."""
    param, weights = build(case)
    inputs = [RNG.standard_normal(shape).astype(np.float32) for shape in case.inputs]
    expected, cpu_net = await _run(case, False, inputs, param, weights)
    await cpu_net.aclose()
    got, gpu_net = await _run(case, True, inputs, param, weights, choices)
    try:
        async with ProfilingExtractor(gpu_net) as ex:
            for i, x in enumerate(inputs):
                ex.input(f"in{i}", x)
            await ex.extract("out0")
            assert ex.profile is not None
            dispatches = list(ex.profile.dispatches)
    finally:
        await gpu_net.aclose()
    for e, g in zip(expected, got, strict=True):
        assert_close(g, e, of_scale)
    return expected, dispatches


CONV_CASES = [c for c in CASES if c.type.startswith("Convolution")]
FLAT_CASES = [c for c in CASES if c.type in ("Pooling", "InnerProduct")]


@pytest.mark.parametrize("flat", ["always", "never"])
@pytest.mark.parametrize("case", FLAT_CASES, ids=[c.id for c in FLAT_CASES])
async def test_flat_and_tiled_layouts(device: VulkanDevice, case: Case, flat: Place) -> None:
    """pooling.comp's outputs flat along x and innerproduct_blocked.comp (CPU devices), and
    the GPU layouts (8 x 8 tiles per channel, a workgroup per output), are the ones dispatched
    and match the reference, whichever device runs the tests."""
    from asyncvk.layers import pooling

    field = "pooling_flat" if case.type == "Pooling" else "innerproduct_flat"
    choices = ShaderChoices(**{field: flat})
    expected, dispatches = await _shaders_against_reference(case, choices=choices)
    if case.type == "InnerProduct":  # float layers (int8 ones keep innerproduct.comp)
        want = "innerproduct_blocked" if flat == "always" else "innerproduct"
        assert {d.shader for d in dispatches} == {want}
        return
    c, oh, ow = (*expected[0].shape, 1, 1)[:3]  # a global pooling's output is (c,)
    windowed = [d.groups for d in dispatches if d.shader == "pooling"]
    assert windowed or "4=1" in case.params.split(), "only a global pooling runs another shader"
    flat_groups = (math.ceil(c * oh * ow / pooling.FLAT_LOCAL[0]), 1, 1)
    assert windowed == [] or windowed == [
        flat_groups if flat == "always" else (math.ceil(ow / 8), math.ceil(oh / 8), c)
    ]


@pytest.mark.parametrize(
    "choice", ["one-output", "tiled", "tiled-plain", "splitk", "gemm", "winograd"]
)
@pytest.mark.parametrize("case", CONV_CASES, ids=[c.id for c in CONV_CASES])
async def test_every_convolution_shader(device: VulkanDevice, case: Case, choice: str) -> None:
    """The tiled shader (chosen on CPU devices), the one-output shader, the split-K shader
    (grouped layers too), the implicit-GEMM shader (chosen on GPUs, by the taps per output
    and the output map) and the Winograd passes (3x3 kernels at stride 1 on CPU devices) all
    match the reference, whichever device runs the tests. With the tiled choice the tiled
    shader's lanes share a tap's weights by subgroupShuffle and the depthwise shader's flat
    layout computes 8 columns an invocation; "tiled-plain" is each lane loading all 8 weights
    and 4 columns."""
    from asyncvk.layers import _conv_shaders

    tiled = choice.startswith("tiled")
    columns = 4 if choice == "tiled-plain" else 8
    gemm = choice.startswith("gemm")
    choices = ShaderChoices(
        conv_winograd="always" if choice == "winograd" else "never",
        conv_tiled="always" if tiled else "never",
        conv_shared_weights=choice == "tiled",
        depthwise_flat_columns=columns,
        conv_splitk="always" if choice == "splitk" else "never",
        conv_gemm="always" if gemm else "never",
        # taps split wherever there are two 16-tap steps (a layer of at most 16 runs whole)
        conv_gemm_fewest_steps=1,
    )
    of_scale = WINOGRAD_ERROR if choice == "winograd" else 3e-6
    expected, dispatches = await _shaders_against_reference(case, of_scale, choices)
    shaders = {d.shader for d in dispatches}
    params = dict(kv.split("=", 1) for kv in case.params.split())
    group, out_c = int(params.get("7", "1")), int(params["0"])
    pure_depthwise = group > 1 and group == out_c == case.inputs[0][0]
    three_by_three = params["1"] == "3" and "11" not in params and params.get("3", "1") == "1"
    if pure_depthwise and tiled:  # the flat layout: blocks of `columns` columns
        oc, oh, ow = expected[0].shape
        flat = (math.ceil(math.ceil(ow / columns) * oh / _conv_shaders.TILED_LOCAL[0]), 1, oc)
        assert [d.groups for d in dispatches] == [flat]
    if pure_depthwise:
        want = "convolutiondepthwise"
    elif choice == "winograd" and group == 1 and three_by_three and "2" not in params:
        wino = {f"convolution_winograd_{p}" for p in ("input", "gemm", "output")}
        assert shaders == wino
        return
    elif (
        tiled
        and _conv_shaders.tiled_convolution(device.info)
        and (group == 1 or out_c // group >= _conv_shaders.TILED_FEWEST_PER_GROUP)
    ):
        want = "convolution_tiled"  # ungrouped, or enough channels a group (3 a group: not)
    elif choice == "splitk":
        want = "convolution_splitk"  # at any size when "always", grouped or not
    elif gemm and group == 1:
        want = "convolution_gemm"
    else:
        want = "convolution"
    taps = int(params["6"]) // out_c
    split = gemm and group == 1 and taps > 16
    assert shaders == ({want, "convolution_gemm_sum"} if split else {want})


DECONV_CASES = [c for c in CASES if c.type.startswith("Deconvolution")]


@pytest.mark.parametrize("tiled", [True, False], ids=["tiled", "gather"])
@pytest.mark.parametrize("case", DECONV_CASES, ids=[c.id for c in DECONV_CASES])
async def test_every_deconvolution_shader(device: VulkanDevice, case: Case, tiled: bool) -> None:
    """deconvolution_tiled.comp (CPU devices: ungrouped, undilated layers) and
    deconvolution.comp both match the reference, whichever device runs the tests."""
    choices = ShaderChoices(conv_tiled="always" if tiled else "never")
    param, weights = build(case)
    inputs = [RNG.standard_normal(shape).astype(np.float32) for shape in case.inputs]
    expected, cpu_net = await _run(case, False, inputs, param, weights)
    await cpu_net.aclose()
    got, gpu_net = await _run(case, True, inputs, param, weights, choices)
    async with ProfilingExtractor(gpu_net) as ex:
        ex.input("in0", inputs[0])
        await ex.extract("out0")
        assert ex.profile is not None
        shaders = {d.shader for d in ex.profile.dispatches}
    await gpu_net.aclose()
    params = dict(kv.split("=", 1) for kv in case.params.split())
    plain = params.get("7", "1") != "1" or params.get("2", "1") != "1"
    assert shaders == {"deconvolution" if plain or not tiled else "deconvolution_tiled"}
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=2e-5)


MOVE_CASES = [c for c in CASES if c.type in ("Concat", "BinaryOp", "Eltwise")] + [
    Case("Concat", "0=-1", [(3, 30, 5), (3, 30, 2)]),  # 180 runs: past MOST_COPIES
    Case("BinaryOp", "0=0", [(4, 1, 6), (4, 1, 6)]),  # a size-1 dim
    Case("BinaryOp", "0=2", [(4, 5, 6), (1,)]),  # one value, broadcast: not the scalar
]


def _move_shader(case: Case, cpu_path: bool) -> set[str]:
    """The shaders a plan should dispatch for ``case`` on the CPU-device or the GPU path."""
    from asyncvk.layers import data_movement

    shapes = case.inputs
    if case.type == "Concat":
        axis = int(case.params.split("=")[1]) % len(shapes[0])
        runs = math.prod(shapes[0][:axis]) * len(shapes)
        if cpu_path and runs <= data_movement.MOST_COPIES:
            return {"vkCmdCopyBuffer"}
        return {"concat" if len(shapes) <= 8 else "scatter"}
    flat = case.type == "Eltwise" or " 1=1" in case.params or shapes[0] == shapes[1]
    return {"binary_flat" if cpu_path and flat else "binary"}


@pytest.mark.parametrize("cpu_path", [True, False], ids=["cpu-path", "gpu-path"])
@pytest.mark.parametrize("case", MOVE_CASES, ids=[c.id for c in MOVE_CASES])
async def test_concat_copies_and_flat_binary(
    device: VulkanDevice, case: Case, cpu_path: bool
) -> None:
    """Concat's buffer copies and binary_flat.comp (CPU devices) match the reference, and so do
    concat.comp and binary.comp (GPUs), whichever device runs the tests."""
    place: Place = "always" if cpu_path else "never"
    choices = ShaderChoices(concat_copies=place, binary_flat=place)
    param, weights = build(case)
    inputs = [RNG.standard_normal(shape).astype(np.float32) for shape in case.inputs]
    inputs = [np.abs(x) + 0.1 if case.positive else x for x in inputs]
    expected, cpu_net = await _run(case, False, inputs, param, weights)
    await cpu_net.aclose()
    got, gpu_net = await _run(case, True, inputs, param, weights, choices)
    async with ProfilingExtractor(gpu_net) as ex:
        for i, x in enumerate(inputs):
            ex.input(f"in{i}", x)
        await ex.extract("out0")
        assert ex.profile is not None
        shaders = {d.shader for d in ex.profile.dispatches}
    await gpu_net.aclose()
    assert shaders == _move_shader(case, cpu_path)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=2e-5)


async def test_concat_copies_count_fp16_values(device: VulkanDevice) -> None:
    """With fp16 storage a copy moves 2 bytes per value (a 4-byte count would overrun)."""
    case = Case("Concat", "0=1", [(3, 2, 5), (3, 3, 5), (3, 1, 5)])
    param, weights = build(case)
    inputs = [RNG.standard_normal(s).astype(np.float16).astype(np.float32) for s in case.inputs]
    choices = ShaderChoices(concat_copies="always")
    net = Net(Option(use_fp16_storage=True, shader_choices=choices))
    async with net:
        await net.load_param(param)
        await net.load_model(weights)
        ex = net.create_extractor()
        for i, x in enumerate(inputs):
            ex.input(f"in{i}", x)
        got = await ex.extract("out0")
    np.testing.assert_array_equal(got, np.concatenate(inputs, axis=1))


def test_gemm_is_offered_to_wide_convolutions_on_gpus(device: VulkanDevice) -> None:
    """On a GPU a layer with enough output channels and taps gets the implicit-GEMM pipeline,
    and a plan uses it for large output maps only (small ones go to split-K or one output per
    invocation); a narrow, shallow or grouped layer, or any layer on a CPU device, does not."""
    import dataclasses

    from asyncvk.layers import _conv_shaders, convolution
    from asyncvk.layers._gpu_api import GpuTarget
    from asyncvk.layers._paramdict import ParamDict
    from asyncvk.shader import ShaderOptions

    def layer(params: dict[int, int | float]) -> convolution.Convolution:
        conv = convolution.ConvolutionDepthWise() if 7 in params else convolution.Convolution()
        conv.load_param(ParamDict(params))
        return conv

    def specs(params: dict[int, int | float], info: GpuInfo) -> set[str]:
        return set(layer(params).pipeline_specs(GpuTarget(ShaderOptions(), info)))

    def records(params: dict[int, int | float], info: GpuInfo, output: tuple[int, int, int]) -> str:
        """What a plan records ``output`` with once the pipelines chosen on ``info`` are built."""
        return layer(params)._path(info, output, specs(params, info).__contains__)

    gpu = dataclasses.replace(device.info, device_type=2)  # a discrete GPU, as far as asked
    cpu = dataclasses.replace(device.info, device_type=4)
    taps, channels = _conv_shaders.GEMM_BOUNDS
    wide = {0: channels, 1: 3, 6: channels * 9 * (taps // 9 + 1)}
    assert "conv_gemm" in specs(wide, gpu)
    narrow = channels - 1
    assert "conv_gemm" not in specs({**wide, 0: narrow, 6: narrow * 9 * (taps // 9 + 1)}, gpu)
    assert "conv_gemm" not in specs({0: channels, 1: 1, 6: channels * (taps - 1)}, gpu)
    assert "conv_gemm" in specs({**wide, 7: 1}, gpu)  # a depthwise type, one group
    assert "conv_gemm" not in specs({**wide, 7: 2}, gpu)  # two groups
    assert "conv_gemm" not in specs(wide, cpu)
    # which one a plan records: by the layer's multiply-adds, per kernel size
    pointwise = {0: channels, 1: 1, 6: channels * taps}
    for params, fewest in zip((pointwise, wide), _conv_shaders.GEMM_WORK, strict=True):
        per_row = channels * 64 * params[6] // channels  # one 64-pixel row of output
        rows = math.ceil(fewest / per_row)
        assert records(params, gpu, (channels, rows, 64)) == "gemm"
        assert records(params, gpu, (channels, rows - 1, 64)) != "gemm"
        assert records(params, cpu, (channels, rows, 64)) != "gemm"
    # before split-K: a deep 1x1 layer on a 7x7 map with enough channel tiles
    deep = {0: 2048, 1: 1, 6: 2048 * 1024}
    assert {"conv_gemm", "conv_splitk"} <= specs(deep, gpu)
    assert records(deep, gpu, (2048, 7, 7)) == "gemm"  # not split-K
    small = {0: 32, 1: 1, 6: 32 * 1024}
    assert records(small, gpu, (32, 7, 7)) == "splitk"  # 1.6M multiply-adds
    # taps split over workgroups when the tiles alone do not fill the GPU
    step = _conv_shaders.GEMM_STEP
    assert _conv_shaders.gemm_split_taps(gpu, (512, 112, 112), 4608) >= 4608  # 1568 tiles: whole
    split = _conv_shaders.gemm_split_taps(gpu, (512, 14, 14), 4608)  # 32 tiles
    assert split % step == 0 and 32 * math.ceil(4608 / split) >= _conv_shaders.GEMM_BUSY
    assert split >= step * gpu.choices.conv_gemm_fewest_steps


def test_winograd_is_for_wide_3x3_layers_on_cpu_devices(device: VulkanDevice) -> None:
    """On a CPU device a 3x3, stride-1, undilated, ungrouped float layer whose input and
    output channels have a harmonic mean of at least 64 runs the three Winograd passes, with
    its weights transformed; any other layer, or any layer on a GPU, does not."""
    import dataclasses

    from asyncvk.layers import convolution
    from asyncvk.layers._gpu_api import GpuTarget
    from asyncvk.layers._paramdict import ParamDict
    from asyncvk.shader import ShaderOptions

    def layer(in_c: int, out_c: int, **extra: int) -> convolution.Convolution:
        params = {0: out_c, 1: 3, 4: 1, 6: out_c * in_c * 9} | {
            int(k[1:]): v for k, v in extra.items()
        }
        conv = convolution.ConvolutionDepthWise() if 7 in params else convolution.Convolution()
        conv.load_param(ParamDict(params))
        return conv

    def winograd(conv: convolution.Convolution, info: GpuInfo) -> bool:
        specs = conv.pipeline_specs(GpuTarget(ShaderOptions(), info))
        return {"wino_in", "wino_gemm", "wino_out"} <= set(specs)

    cpu = dataclasses.replace(device.info, device_type=4)
    gpu = dataclasses.replace(device.info, device_type=2)
    assert winograd(layer(64, 64), cpu) and winograd(layer(48, 96), cpu)  # harmonic 64
    assert not winograd(layer(48, 95), cpu) and not winograd(layer(3, 512), cpu)
    assert not winograd(layer(64, 64), gpu)
    assert not winograd(layer(64, 64, p3=2), cpu)  # stride 2
    assert not winograd(layer(64, 64, p2=2), cpu)  # dilation 2
    assert not winograd(layer(64, 64, p11=1), cpu)  # 3x1
    assert not winograd(layer(64, 128, p7=2), cpu)  # two groups
    assert not winograd(layer(64, 64, p8=1), cpu)  # int8
    assert winograd(layer(64, 64, p7=1), cpu)  # a depthwise type, one group
    # built in the background, their transformed weights (36 positions x 64 channels x 64
    # inputs) made there too, beside the direct shader's
    wide = layer(64, 64)
    wide.weight = RNG.standard_normal(64 * 64 * 9).astype(np.float32)
    target = GpuTarget(ShaderOptions(), cpu)
    assert {"wino_in", "wino_gemm", "wino_out"} <= wide.background_pipelines(target)
    assert "conv" in wide.pipeline_specs(target)
    assert wide.gpu_weights(target)["weight"].size == 64 * 64 * 9
    chosen = wide.background_pipelines(target)
    assert wide.background_weights(target, chosen)["weight_winograd"].size == 36 * 64 * 64
    narrow = layer(48, 95)
    assert narrow.background_weights(target, narrow.background_pipelines(target)) == {}


def test_the_tiled_convolution_needs_shuffles_and_shares_weights_in_8_lanes(
    device: VulkanDevice,
) -> None:
    """convolution_tiled.comp hands a tap's weights from lane to lane by subgroupShuffle within
    its 8-lane workgroup: a CPU device without shuffles runs convolution.comp instead, and one
    whose subgroups may hold fewer than 8 lanes runs the tiled shader with every lane loading
    its own weights (specialization constant 13 off)."""
    import dataclasses

    from asyncvk.layers import convolution
    from asyncvk.layers._gpu_api import GpuTarget
    from asyncvk.layers._paramdict import ParamDict
    from asyncvk.shader import ShaderOptions

    conv = convolution.Convolution()
    conv.load_param(ParamDict({0: 16, 1: 1, 6: 16 * 8}))

    def shared(info: GpuInfo) -> int | float:
        return conv.pipeline_specs(GpuTarget(ShaderOptions(), info))["conv"].specializations[-1]

    cpu = dataclasses.replace(
        device.info, device_type=4, subgroup_operations=0xFF, min_subgroup_size=8
    )
    assert conv.shader(cpu)[0] == "convolution_tiled" and shared(cpu) == 1
    no_shuffle = dataclasses.replace(cpu, subgroup_operations=0xFF & ~0x10)
    assert conv.shader(no_shuffle)[0] == "convolution"
    narrow = dataclasses.replace(cpu, min_subgroup_size=4)
    assert conv.shader(narrow)[0] == "convolution_tiled" and shared(narrow) == 0


def test_depthwise_layers_take_8_columns_on_cpu_devices(device: VulkanDevice) -> None:
    """convolutiondepthwise.comp's flat layout (CPU devices) computes 8 columns an invocation,
    GPUs' layout 4; the column count is its specialization constant 12 (0: GPUs' layout)."""
    import dataclasses

    from asyncvk.layers import convolution
    from asyncvk.layers._gpu_api import GpuTarget
    from asyncvk.layers._paramdict import ParamDict
    from asyncvk.shader import ShaderOptions

    def columns(kernel: int, stride: int, info: GpuInfo) -> int:
        conv = convolution.ConvolutionDepthWise()
        conv.load_param(ParamDict({0: 16, 1: kernel, 3: stride, 6: 16 * kernel**2, 7: 16}))
        shader, cols, _ = conv.shader(info)
        assert shader == "convolutiondepthwise"
        spec = conv.pipeline_specs(GpuTarget(ShaderOptions(), info))["conv"]
        assert spec.specializations[-1] == (cols if info.is_cpu else 0)  # flat_columns (id 12)
        return cols

    cpu = dataclasses.replace(device.info, device_type=4)
    gpu = dataclasses.replace(device.info, device_type=2)
    assert columns(3, 1, cpu) == columns(5, 2, cpu) == 8
    assert columns(3, 1, gpu) == columns(5, 1, gpu) == 4


def test_split_k_is_offered_to_deep_convolutions_on_gpus(device: VulkanDevice) -> None:
    """On a GPU (not a CPU device) a layer with enough taps per output gets the split-K pipeline
    beside the one-output one, and a plan uses it for small output maps only; a shallow layer,
    a grouped one or any layer on a CPU device does not get it (lavapipe runs the tiled one)."""
    import dataclasses

    from asyncvk.layers import _conv_shaders, convolution
    from asyncvk.layers._gpu_api import GpuTarget
    from asyncvk.layers._paramdict import ParamDict
    from asyncvk.shader import ShaderOptions

    def layer(params: dict[int, int | float]) -> convolution.Convolution:
        conv = convolution.Convolution()
        conv.load_param(ParamDict(params))
        return conv

    def specs(params: dict[int, int | float], info: GpuInfo) -> set[str]:
        return set(layer(params).pipeline_specs(GpuTarget(ShaderOptions(), info)))

    def records(params: dict[int, int | float], info: GpuInfo, output: tuple[int, int, int]) -> str:
        """What a plan records ``output`` with once the pipelines chosen on ``info`` are built."""
        return layer(params)._path(info, output, specs(params, info).__contains__)

    if not device.info.subgroup_operations & 0x4:
        pytest.skip("no subgroup arithmetic on this device")
    gpu = dataclasses.replace(device.info, device_type=2)  # a discrete GPU, as far as asked
    taps, most_pixels, most_outputs = _conv_shaders.SPLITK_POINTWISE
    deep = {0: 8, 1: 1, 6: 8 * taps}
    assert specs(deep, gpu) == {"conv", "conv_splitk"}
    assert specs({0: 8, 1: 1, 6: 8 * (taps - 1)}, gpu) == {"conv"}
    assert specs({**deep, 7: 2, 6: 8 * taps // 2}, gpu) == {"conv"}  # grouped
    assert specs(deep, device.info) == ({"conv"} if device.info.is_cpu else {"conv", "conv_splitk"})
    # which one a plan records: by the output map and the output count
    assert records(deep, gpu, (8, 7, 7)) == "splitk"
    assert records(deep, gpu, (8, most_pixels + 1, 1)) == "conv"
    assert records(deep, gpu, (most_outputs // 49 + 1, 7, 7)) == "conv"
    spatial_taps, spatial_pixels, _ = _conv_shaders.SPLITK_SPATIAL
    side = int(spatial_pixels**0.5)
    k3 = {0: 8, 1: 3, 6: 8 * 9 * (spatial_taps // 9 + 1)}
    assert records(k3, gpu, (8, 7, 7)) == "splitk"
    assert records(k3, gpu, (8, side + 1, side + 1)) == "conv"


LINE_CASES = [
    Case("Softmax", "0=0", [(4, 3, 5)]),
    Case("Softmax", "0=1 1=1", [(3, 300, 2)]),
    Case("Softmax", "0=0", [(1000,)]),
    Case("Softmax", "0=-1 1=1", [(2, 3, 700)]),
    Case("Pooling", "0=0 4=1", [(6, 5, 7)]),
    Case("Pooling", "0=1 4=1", [(6, 5, 7)]),
    Case("Pooling", "0=0 4=1", [(5, 40, 33)]),
    Case("Pooling", "0=1 4=1", [(5, 40, 33)]),
]


@pytest.mark.parametrize("lines", [False, True], ids=["one-invocation", "workgroup"])
@pytest.mark.parametrize("case", LINE_CASES, ids=[c.id for c in LINE_CASES])
async def test_every_line_reduction_shader(device: VulkanDevice, case: Case, lines: bool) -> None:
    """Softmax and global pooling with one invocation per line (CPU devices) and with a
    workgroup per line (GPUs), against the reference. Max pooling keeps ncnn's NaN rule (NaN
    only where a channel's first value is NaN) and an all -inf channel stays -inf."""
    choices = ShaderChoices(line_shaders="always" if lines else "never")
    param, weights = build(case)
    x = RNG.standard_normal(case.inputs[0]).astype(np.float32)
    if case.type == "Pooling":
        x[0, 0, 0] = np.nan  # NaN out
        x[1, 2, 3] = np.nan  # ignored by max, NaN for the average
        x[2] = -np.inf
    expected, cpu_net = await _run(case, False, [x], param, weights)
    await cpu_net.aclose()
    got, gpu_net = await _run(case, True, [x], param, weights, choices)
    async with ProfilingExtractor(gpu_net) as ex:
        ex.input("in0", x)
        await ex.extract("out0")
        assert ex.profile is not None
        shaders = {d.shader for d in ex.profile.dispatches}
    await gpu_net.aclose()
    one, wide = (
        ("softmax", "softmax_lines") if case.type == "Softmax" else ("pooling", "pooling_global")
    )
    assert shaders == {wide if lines else one}
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-6)
    if case.type == "Pooling" and case.params.startswith("0=0"):
        assert np.isnan(got[0][0]) and not np.isnan(got[0][1]) and got[0][2] == -np.inf


def test_a_workgroup_per_line_is_for_long_lines_on_gpus(device: VulkanDevice) -> None:
    """CPU devices keep one invocation per line (and compile no second pipeline); on a GPU a
    plan gives a workgroup to each line of at least 64 values, up to 65536 lines."""
    import dataclasses

    from asyncvk.layers import _line_shaders

    cpu = dataclasses.replace(device.info, device_type=4)
    assert not _line_shaders.offered(cpu)
    assert _line_shaders.offered(device.info) == (not device.info.is_cpu)
    gpu = dataclasses.replace(device.info, device_type=2)
    assert _line_shaders.chosen(gpu, 1, 1000) and _line_shaders.chosen(gpu, 65_536, 64)
    assert not _line_shaders.chosen(gpu, 1, 63) and not _line_shaders.chosen(gpu, 65_537, 1000)
    assert _line_shaders.local_size(device.info) == (256, 1, 1)
