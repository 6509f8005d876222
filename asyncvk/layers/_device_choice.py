"""The rule of the shader and recording choices that win on CPU devices (lavapipe) only.

Each such choice is a module setting, so a test can force it: "cpu" (the default: CPU devices
take it, GPUs do not), "always" or "never". A choice that pipelines or weights depend on is
made when they are chosen at load, and recording reads it back from the pipelines built
(``RecordContext.spec``): a setting changed later applies from the next load. A choice with no
pipeline of its own (a Concat's buffer copies) is made when a plan is recorded.
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
