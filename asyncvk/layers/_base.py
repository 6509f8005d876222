"""Layer: one ncnn layer type, its parameters, its weights and its numpy reference.

Blobs on the CPU are float32 numpy arrays laid out as ncnn's Mat: dims 1 = (w,), 2 = (h, w),
3 = (c, h, w), 4 = (c, d, h, w). ncnn's axis numbers in params (Concat, Slice, Softmax,
Reduction, Permute, ...) index that numpy shape directly (negative values count from the end).
"""

from __future__ import annotations

from typing import ClassVar, Protocol

import numpy as np

from ..net._paramdict import ParamDict


class ModelBin(Protocol):
    """Where a layer reads its weights from, in file order (ncnn's ModelBin)."""

    def load(self, w: int, type: int) -> np.ndarray:
        """Read ``w`` values; ``type`` 0 reads a tagged buffer (fp32/fp16), 1 raw fp32.

        Returns a 1-D float32 array of length ``w``.
        """
        ...


class Layer:
    """Base of every layer: parameters, weights and the CPU (numpy) forward pass.

    Subclasses set ``type_name`` to the ncnn type name and override ``load_param``,
    ``load_model`` (when they have weights) and ``forward``.
    """

    type_name: ClassVar[str] = ""
    #: True when the layer takes exactly one input blob and gives one output blob.
    one_blob_only: ClassVar[bool] = True

    def __init__(self) -> None:
        self.name: str = ""
        self.bottoms: list[str] = []
        self.tops: list[str] = []
        self.featmask: int = 0

    def load_param(self, pd: ParamDict) -> None:
        """Read parameters; raise ValueError naming the param id on a bad value."""

    def load_model(self, mb: ModelBin) -> None:
        """Read weights in ncnn's order."""

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The numpy reference: the CPU path and the ground truth for the GPU shaders."""
        raise NotImplementedError(f"{self.type_name} has no CPU forward")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {self.bottoms} -> {self.tops}>"
