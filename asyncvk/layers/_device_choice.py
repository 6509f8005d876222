"""The rule of the shader and recording choices that win on CPU devices (lavapipe) only.

Each such choice is a module setting, so a test can force it: "cpu" (the default: CPU devices
take it, GPUs do not), "always" or "never". A layer reads it when its pipelines and weights are
chosen at load; recording reads the choice back from the pipelines built
(``RecordContext.spec``), so a setting changed later applies from the next load.
"""

from __future__ import annotations

from ..gpu._info import GpuInfo

#: The workgroup of the layouts flat along x that these choices use: llvmpipe runs a
#: workgroup's invocations 8 at a time along x.
FLAT_LOCAL = (8, 1, 1)


_SUBGROUP_BASIC_AND_SHUFFLE = 0x1 | 0x10  # VK_SUBGROUP_FEATURE_BASIC_BIT | SHUFFLE_BIT


def has_subgroup_shuffles(info: GpuInfo) -> bool:
    """Whether compute shaders on ``info``'s device may use subgroupShuffle: the CPU-device
    GEMM (gemm_tiled.comp) and tiled convolution (convolution_tiled.comp) hand values between
    lanes with it (llvmpipe: one vpermd)."""
    wanted = _SUBGROUP_BASIC_AND_SHUFFLE
    return info.subgroup_operations & wanted == wanted


def on_cpu_devices(setting: str, info: GpuInfo) -> bool:
    """Whether a choice set to ``setting`` is taken on ``info``'s device."""
    return setting == "always" or (setting == "cpu" and info.is_cpu)
