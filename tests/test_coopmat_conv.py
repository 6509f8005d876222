"""The implicit-GEMM convolution on the matrix units (convolution_gemm_coopmat.comp): chosen only
where a net asks for fp16 arithmetic on a device with 16 x 16 fp16 blocks, a drop-in for the
fp32 GEMM shader's interface, and on such a device within fp16 rounding of the fp32 result.
The last test needs the matrix units (an NVIDIA GPU); lavapipe has none, so there it skips."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_layers_gpu import RNG, Case, build, conv_weights

from asyncvk.gpu import VulkanDevice
from asyncvk.gpu._info import GpuInfo
from asyncvk.gpu._shader_choices import ShaderChoices
from asyncvk.layers import _conv_shaders, convolution
from asyncvk.layers._gpu_api import GpuTarget
from asyncvk.layers._paramdict import ParamDict
from asyncvk.net._dispatch_profile import ProfilingExtractor
from asyncvk.net._net import Net
from asyncvk.net._option import Option
from asyncvk.shader import ShaderOptions, builtin_shaders, compile_glsl, reflect_spirv
from asyncvk.shader._interface import declared_interface, interface_mismatch
from asyncvk.shader._options import option_prelude, splice_prelude

FP16_ARITHMETIC = ShaderOptions(use_fp16_arithmetic=True)
_COOPERATIVE_MATRIX_NV = 5357  # SPIR-V's CooperativeMatrixNV capability


def _matrix_unit_gpu(info: GpuInfo, **change: object) -> GpuInfo:
    facts: dict[str, object] = {
        "device_type": 2,
        "support_cooperative_matrix": True,
        "subgroup_size": 32,
        "min_subgroup_size": 32,
        "max_subgroup_size": 32,
    }
    return dataclasses.replace(info, **(facts | change))  # type: ignore[arg-type]


def _gemm_shader(info: GpuInfo, options: ShaderOptions) -> str:
    conv = convolution.Convolution()
    conv.load_param(ParamDict({0: 64, 1: 3, 6: 64 * 32 * 9}))
    return conv.pipeline_specs(GpuTarget(options, info))["conv_gemm"].shader


def test_the_matrix_unit_shader_only_where_asked_for_and_present(device: VulkanDevice) -> None:
    gpu = _matrix_unit_gpu(device.info)
    assert _gemm_shader(gpu, FP16_ARITHMETIC) == "convolution_gemm_coopmat"
    assert _gemm_shader(gpu, ShaderOptions()) == "convolution_gemm"  # fp32 asked for
    assert _gemm_shader(gpu, ShaderOptions(use_fp16_storage=True)) == "convolution_gemm"
    no_units = _matrix_unit_gpu(device.info, support_cooperative_matrix=False)
    assert _gemm_shader(no_units, FP16_ARITHMETIC) == "convolution_gemm"
    wide = _matrix_unit_gpu(device.info, subgroup_size=64, min_subgroup_size=64)
    assert _gemm_shader(wide, FP16_ARITHMETIC) == "convolution_gemm"
    varying = _matrix_unit_gpu(device.info, max_subgroup_size=64)
    assert _gemm_shader(varying, FP16_ARITHMETIC) == "convolution_gemm"
    never = dataclasses.replace(gpu, choices=ShaderChoices(conv_gemm_coopmat="never"))
    assert _gemm_shader(never, FP16_ARITHMETIC) == "convolution_gemm"


@pytest.mark.parametrize("storage_fp16", [False, True], ids=["fp32-storage", "fp16-storage"])
def test_the_matrix_unit_shader_has_the_gemm_interface(storage_fp16: bool) -> None:
    """A layer swaps one shader for the other with the same bindings, push constants and
    specialization constants, so the SPIR-V must declare exactly the fp32 GEMM's interface."""
    registry = builtin_shaders()
    options = ShaderOptions(use_fp16_storage=storage_fp16, use_fp16_arithmetic=True)
    text = splice_prelude(registry.get("convolution_gemm_coopmat").source, option_prelude(options))
    body = compile_glsl(text, "convolution_gemm_coopmat.comp", defines={"AVK_SUBGROUP_SIZE": "32"})
    gemm = declared_interface(registry.get("convolution_gemm").source)
    assert interface_mismatch(reflect_spirv(body), gemm) is None
    words = np.frombuffer(body, np.uint32)
    capabilities = {int(words[i + 1]) for i in range(5, len(words) - 1) if words[i] == 0x20011}
    assert _COOPERATIVE_MATRIX_NV in capabilities  # OpCapability CooperativeMatrixNV


MATRIX_UNIT_CASES = [
    # edge tiles on both sides (70 channels, 132 pixels), taps split in several parts
    Case("Convolution", "0=70 1=3 4=1 5=1 6=12600 9=1", [(20, 12, 11)], conv_weights(70, 20, 3)),
    # a 1x1 layer, 96 taps, no bias, leaky activation
    Case(
        "Convolution",
        "0=64 1=1 5=0 6=6144 9=2 -23310=1,0.1",
        [(96, 9, 9)],
        conv_weights(64, 96, 1, bias=False),
    ),
    # stride, dilation, padding value: every index path of the patch matrix
    Case(
        "Convolution",
        "0=33 1=3 2=2 3=2 4=2 5=1 6=5346 9=1 18=0.25",
        [(18, 17, 19)],
        conv_weights(33, 18, 3),
    ),
]


async def _outputs(
    option: Option, param: bytes, weights: bytes, x: np.ndarray
) -> tuple[np.ndarray, set[str]]:
    """The layer's output, and the shaders a profiled GPU run dispatched (none on the CPU)."""
    async with Net(option) as net:
        await net.load_param(param)
        await net.load_model(weights)
        await net.background_builds()  # the GEMM pipelines adopted
        if option.use_vulkan_compute is False:
            ex = net.create_extractor()
            ex.input("in0", x)
            return await ex.extract("out0"), set()
        async with ProfilingExtractor(net) as profiled:
            profiled.input("in0", x)
            out = await profiled.extract("out0")
            assert profiled.profile is not None
            return out, {d.shader for d in profiled.profile.dispatches}


#: how a layer's taps are split over workgroups: in 16-tap parts (each workgroup one step, half
#: of it masked, the sum pass adds bias and activation), not at all (every step accumulated and
#: prefetched in one workgroup, the shader's own epilogue), and in parts of at least 64 taps:
#: each as the fewest 16-tap steps a split takes, and the workgroups that fill the device
SPLITS = {
    "split16": (1, _conv_shaders.GEMM_BUSY),
    "whole": (4, 1),
    "split64": (4, _conv_shaders.GEMM_BUSY),
}


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("case", MATRIX_UNIT_CASES, ids=[c.id for c in MATRIX_UNIT_CASES])
async def test_on_matrix_units_within_fp16_rounding_of_fp32(
    device: VulkanDevice, case: Case, split: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not _conv_shaders.gemm_coopmat(FP16_ARITHMETIC, device.info):
        pytest.skip(f"{device.info.device_name} has no 16x16 fp16 matrix units")
    fewest_steps, busy = SPLITS[split]
    monkeypatch.setattr(_conv_shaders, "GEMM_BUSY", busy)  # a size of the device, not a choice
    choices = ShaderChoices(conv_gemm="always", conv_gemm_fewest_steps=fewest_steps)
    param, weights = build(case)
    x = RNG.standard_normal(case.inputs[0]).astype(np.float32)
    expected, _ = await _outputs(Option(use_vulkan_compute=False), param, weights, x)
    fp16 = Option(use_fp16_arithmetic=True, shader_choices=choices)
    got, shaders = await _outputs(fp16, param, weights, x)
    assert "convolution_gemm_coopmat" in shaders and "convolution_gemm" not in shaders
    if split == "whole":
        assert "convolution_gemm_sum" not in shaders
    # operands rounded to fp16 (2^-11 relative each), sums in fp32
    error = np.linalg.norm(got - expected) / np.linalg.norm(expected)
    assert error < 2e-3, error


def test_a_raw_instance_function_is_called_and_checked() -> None:
    """``_vk.instance_proc_raw`` hands out the C function the loader has, its VkResult checked;
    None for a name the loader does not know."""
    from asyncvk import _vk
    from asyncvk.gpu._instance import instance

    vk_instance = instance()
    enumerate_devices = _vk.instance_proc_raw(
        vk_instance.handle, "vkEnumeratePhysicalDevices", "PFN_vkEnumeratePhysicalDevices"
    )
    assert enumerate_devices is not None
    count = _vk.ffi.new("uint32_t*")
    assert enumerate_devices(vk_instance.handle, count, _vk.ffi.NULL) == 0
    assert count[0] == len(vk_instance.physical_devices)
    missing = _vk.instance_proc_raw(vk_instance.handle, "vkNoSuchFunction", "PFN_vkVoidFunction")
    assert missing is None


@pytest.mark.parametrize(
    ("shapes", "found"),
    [
        ([(16, 16, 16, 0, 0, 1, 1, 3)], True),
        ([(16, 8, 16, 0, 0, 1, 1, 3), (16, 16, 16, 0, 0, 0, 0, 3)], False),  # fp16 sums only
        ([(16, 16, 16, 0, 0, 1, 1, 2)], False),  # workgroup scope
        ([], False),
    ],
)
def test_the_matrix_units_are_found_by_their_shapes(
    monkeypatch: pytest.MonkeyPatch, shapes: list[tuple[int, ...]], found: bool
) -> None:
    """Only 16 x 16 x 16 blocks of fp16 into fp32 at subgroup scope count; each element the
    driver fills has its sType set (the spec asks for it; the binding's wrapper does not)."""
    from asyncvk import _vk
    from asyncvk.gpu import _instance

    seen_types: list[int] = []

    def list_shapes(pd: object, count: object, props: object) -> int:
        if props == _vk.ffi.NULL:
            count[0] = len(shapes)  # type: ignore[index]
            return 0
        for i, (m, n, k, a, b, c, d, scope) in enumerate(shapes):
            p = props[i]  # type: ignore[index]
            seen_types.append(p.sType)
            p.MSize, p.NSize, p.KSize = m, n, k
            p.AType, p.BType, p.CType, p.DType, p.scope = a, b, c, d, scope
        return 0

    monkeypatch.setattr(_vk, "instance_proc_raw", lambda *args: list_shapes)
    assert _instance._coopmat_fp16_block(None, None) is found
    structure = _vk.vkapi.VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_NV
    assert seen_types == [structure] * len(shapes)
