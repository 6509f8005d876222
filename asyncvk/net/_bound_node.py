"""BoundNode: one graph node's GPU half, what a GpuModel holds for it and plans record with."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..gpu._memory import Buffer
from ..gpu._pipeline import PipelineArtifact
from ..layers._gpu_layer import GpuLayer
from ._graph import GraphNode


@dataclass(eq=False)
class BoundNode:
    """One graph node's GPU half: its layer bound to the device, pipelines and weights."""

    node: GraphNode
    gpu_layer: GpuLayer
    pipelines: dict[str, PipelineArtifact] = field(default_factory=dict)
    #: Shape-baked pipelines by (pipeline key, push bytes): see ``_shape_hints``.
    baked: dict[tuple[str, bytes], PipelineArtifact] = field(default_factory=dict)
    weights: dict[str, Buffer] = field(default_factory=dict)

    def attach(self, key: str | tuple[str, bytes], artifact: PipelineArtifact) -> None:
        """Give the node a built pipeline: a shape-baked one under (key, push bytes)."""
        if isinstance(key, tuple):
            self.baked[key] = artifact
        else:
            self.pipelines[key] = artifact
