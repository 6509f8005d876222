"""GpuLayer: one layer of a parsed model bound to one device (what a plan records through).

The layer itself stays device-free; binding pairs it with a :class:`GpuTarget` so the runtime
can ask for its pipelines, weights and dispatches without passing the target each time.
"""

from __future__ import annotations

import numpy as np

from ._base import Layer, Shape
from ._gpu_api import GpuBlob, GpuTarget, PipelineSpec, RecordContext


class GpuLayer:
    """``layer`` on ``target``: the Vulkan half of a layer, for one device."""

    __slots__ = ("_background", "_specs", "layer", "target")

    def __init__(self, layer: Layer, target: GpuTarget) -> None:
        self.layer = layer
        self.target = target
        self._specs: dict[str, PipelineSpec] | None = None
        self._background: frozenset[str] | None = None

    @property
    def alias(self) -> bool:
        return self.layer.alias

    def supports(self, input_shapes: list[Shape]) -> bool:
        return self.layer.supports(input_shapes)

    def pipeline_specs(self) -> dict[str, PipelineSpec]:
        """The layer's pipelines on this device, chosen once: the choices are made then, and
        recording reads them back (``RecordContext.spec``)."""
        if self._specs is None:
            self._specs = self.layer.pipeline_specs(self.target)
            self._background = self.layer.background_pipelines(self.target)
        return self._specs

    def background_pipelines(self) -> frozenset[str]:
        """Which of them a load does not wait for, chosen with them."""
        self.pipeline_specs()
        assert self._background is not None
        return self._background

    def weights(self) -> dict[str, np.ndarray]:
        return self.layer.gpu_weights(self.target)

    def background_weights(self) -> dict[str, np.ndarray]:
        return self.layer.background_weights(self.target, self.background_pipelines())

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        self.layer.record(ctx, inputs, outputs)

    def __repr__(self) -> str:
        return f"<GpuLayer {self.layer!r}>"


def bind_gpu(layer: Layer, target: GpuTarget) -> GpuLayer | None:
    """The GPU side of ``layer`` on ``target``, or None for a CPU-only type."""
    return GpuLayer(layer, target) if type(layer).gpu else None
