"""What a Plan reads of the GpuModel it is made for: the device, each node's bound layer, the
storage type and the pipelines' version. A protocol, so that plans do not import the GpuModel
(a GpuModel makes plans and pools them); a plan reports what it recorded, it writes nothing
back."""

from __future__ import annotations

from typing import Protocol

from ..gpu._device import VulkanDevice
from ..gpu._pipeline import PipelineArtifact
from ..layers._gpu_api import GpuTarget
from ._bound_node import BoundNode


class PlanSource(Protocol):
    """A GpuModel, as its plans see it."""

    device: VulkanDevice
    #: the device as the model's layers declared for it (its shader choices included)
    target: GpuTarget
    #: graph node index -> its GPU half
    bound: dict[int, BoundNode]
    #: blobs are stored as float16
    storage_fp16: bool
    #: with fp16 storage, the pipelines converting inputs and outputs on the GPU
    io_casts: dict[str, PipelineArtifact]
    #: bumped when better pipelines are adopted: older plans are dropped
    pipelines_version: int
