"""BoundNode: one graph node's layer on one device, the one object a GpuModel holds for it.

The layer itself stays device-free; binding pairs it with the load's :class:`GpuTarget` and
chooses its pipelines once, so the load requests, the weights it uploads and every plan that
records it read the same choice. The node then holds what the load built: its pipelines and its
weights on the device.
"""

from __future__ import annotations

import numpy as np

from ..gpu._memory import Buffer
from ..gpu._pipeline import PipelineArtifact
from ..layers._base import Layer, Shape
from ..layers._gpu_api import GpuBlob, GpuTarget, PipelineSpec, RecordContext
from ._graph import GraphNode


class BoundNode:
    """``node``'s layer bound to ``target``: its chosen pipelines, then what the load built.

    Raises what the layer raises when its params cannot run on the GPU (the caller names the
    node)."""

    __slots__ = ("background", "baked", "node", "pipelines", "specs", "target", "weights")

    def __init__(self, node: GraphNode, target: GpuTarget) -> None:
        self.node = node
        self.target = target
        #: the layer's pipelines on this device by key, chosen once (``RecordContext.spec``)
        self.specs: dict[str, PipelineSpec] = node.layer.pipeline_specs(target)
        #: which of them a load does not wait for, chosen with them
        self.background: frozenset[str] = node.layer.background_pipelines(target)
        self.pipelines: dict[str, PipelineArtifact] = {}
        #: Shape-baked pipelines by (pipeline key, push bytes): see ``_shape_hints``.
        self.baked: dict[tuple[str, bytes], PipelineArtifact] = {}
        self.weights: dict[str, Buffer] = {}

    @property
    def layer(self) -> Layer:
        return self.node.layer

    @property
    def alias(self) -> bool:
        """Whether the layer's tops share its bottoms' storage (Split, Noop): nothing records."""
        return self.node.layer.alias

    def supports(self, input_shapes: list[Shape]) -> bool:
        """Whether the GPU records the layer for these input shapes (else the CPU runs it)."""
        return self.node.layer.supports(input_shapes)

    def gpu_weights(self) -> dict[str, np.ndarray]:
        """The arrays the layer's recording reads, as this device's choices lay them out."""
        return self.node.layer.gpu_weights(self.target)

    def background_weights(self) -> dict[str, np.ndarray]:
        """The arrays only its background pipelines read (uploaded before they are handed
        over)."""
        return self.node.layer.background_weights(self.target, self.background)

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        self.node.layer.record(ctx, inputs, outputs)

    def attach(self, key: str | tuple[str, bytes], artifact: PipelineArtifact) -> None:
        """Give the node a built pipeline: a shape-baked one under (key, push bytes)."""
        if isinstance(key, tuple):
            self.baked[key] = artifact
        else:
            self.pipelines[key] = artifact

    def __repr__(self) -> str:
        return f"<BoundNode {self.node.layer!r}>"
