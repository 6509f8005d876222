"""Which Vulkan device a replica uses when a cluster scheduler (Ray) gave it a GPU.

The scheduler names GPUs as the NVIDIA driver counts them (``nvidia-smi``'s indices, in PCI
bus order), and sets ``CUDA_VISIBLE_DEVICES``, which Vulkan ignores: every process still sees
every GPU. So the replica takes the discrete Vulkan devices in the order the loader lists them,
which for one vendor's GPUs is their PCI bus order too, and uses the one at the index it was
given. ``Option.vulkan_device`` set by the user wins; without an assigned GPU, or on a machine
with no discrete device (a CPU device in tests), the default device is used.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ..net._option import Option


def replica_option(option: Option, gpu_ids: Sequence[int | str]) -> Option:
    """``option`` with ``vulkan_device`` set to the device of the first of ``gpu_ids``.

    Raises:
        ValueError: the GPU index is past the discrete Vulkan devices this machine lists.
    """
    if option.vulkan_device is not None or option.use_vulkan_compute is False or not gpu_ids:
        return option
    from ..gpu import get_gpu_count, get_gpu_info

    discrete = [i for i in range(get_gpu_count()) if get_gpu_info(i).type_name == "discrete"]
    if not discrete:
        return option
    try:
        index = int(gpu_ids[0])
    except ValueError:
        raise ValueError(
            f"the replica was given GPU {gpu_ids[0]!r}, not an index: set Option.vulkan_device"
        ) from None
    if index >= len(discrete):
        raise ValueError(
            f"the replica was given GPU {index}, but Vulkan lists {len(discrete)} discrete "
            "device(s) here: set Option.vulkan_device"
        )
    return dataclasses.replace(option, vulkan_device=discrete[index])
