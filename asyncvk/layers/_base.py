"""Layer: one ncnn layer type, its parameters, its weights and its numpy reference.

Blobs on the CPU are float32 numpy arrays laid out as ncnn's Mat: dims 1 = (w,), 2 = (h, w),
3 = (c, h, w), 4 = (c, d, h, w). ncnn's axis numbers in params (Concat, Slice, Softmax,
Reduction, Permute, ...) index that numpy shape directly (negative values count from the end).
"""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import numpy as np

from ._gpu_api import GpuBlob, GpuTarget, PipelineSpec, RecordContext
from ._limits import check_shape
from ._paramdict import ParamDict
from ._schema import Param, collect_params, read_params

Shape = tuple[int, ...]
#: How many blobs a layer takes or gives: (fewest, most), most None for no upper bound.
BlobCount = tuple[int, int | None]


class ModelBin(Protocol):
    """Where a layer reads its weights from, in file order (ncnn's ModelBin)."""

    def load(self, w: int, type: int) -> np.ndarray:
        """Read ``w`` values; ``type`` 0 reads a tagged buffer (fp32/fp16), 1 raw fp32.

        Returns a 1-D float32 array of length ``w``.
        """
        ...

    def load_int8_or_float(self, w: int) -> np.ndarray:
        """``load(w, 0)`` for weights ncnn may store quantized (tag 0x000D4B38): a 1-D int8
        array then, float32 otherwise. Only int8-capable layers call it."""
        ...


class Layer:
    """Base of every layer: parameters, weights, the CPU (numpy) forward pass and, for types
    with a Vulkan path, the pipelines it declares and the dispatches it records.

    Subclasses declare their params as :class:`~._schema.Param` class attributes (read by
    ``load_param``; cross-param rules go in ``validate``) and override ``load_model`` (when
    they have weights), ``output_shapes`` and ``forward``; layers that are not one-blob-only
    also override ``blob_counts``. GPU-capable types set ``gpu = True`` and override
    ``pipeline_specs``, ``record`` and, as needed, ``gpu_weights`` and ``supports``. The GPU
    methods take the device as a :class:`GpuTarget` argument: a layer holds no device state.
    """

    type_name: ClassVar[str] = ""
    #: True when the layer takes exactly one input blob and gives one output blob.
    one_blob_only: ClassVar[bool] = True
    #: The declared params, base classes first (filled for each subclass).
    params: ClassVar[tuple[Param[Any], ...]] = ()
    #: True for types with a Vulkan path.
    gpu: ClassVar[bool] = False
    #: True when the GPU outputs share the input's bytes (Split, Reshape, Noop, ...).
    alias: bool = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.params = collect_params(cls)

    def __init__(self) -> None:
        self.name: str = ""
        self.bottoms: list[str] = []
        self.tops: list[str] = []
        self.featmask: int = 0

    def load_param(self, pd: ParamDict) -> None:
        """Read the declared params, then ``validate``; ValueError names the param id."""
        read_params(self, self.params, pd)
        self.validate()

    def validate(self) -> None:
        """Check rules between params (after ``load_param`` has read them)."""

    def load_model(self, mb: ModelBin) -> None:
        """Read weights in ncnn's order."""

    def blob_counts(self) -> tuple[BlobCount, BlobCount]:
        """How many (bottoms, tops) this layer takes, once ``load_param`` has run.

        ncnn reads only the blobs it expects and ignores or overruns the rest; asyncvk refuses
        a layer line whose counts do not fit at load.
        """
        if self.one_blob_only:
            return (1, 1), (1, 1)
        raise NotImplementedError(f"{self.type_name} must state its blob counts")

    def check_blob_counts(self, bottoms: int, tops: int) -> None:
        """Raise ValueError when ``bottoms`` inputs or ``tops`` outputs do not fit."""
        accepted_in, accepted_out = self.blob_counts()
        _check_count(self.type_name, "takes", "input", accepted_in, bottoms)
        _check_count(self.type_name, "gives", "output", accepted_out, tops)

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        """The shapes ``forward`` gives for inputs of these shapes; ValueError when the layer
        cannot take them. Never allocates."""
        raise NotImplementedError(f"{self.type_name} has no shape rule")

    def checked_output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        """``output_shapes``, one per top, each checked against the size limits."""
        shapes = self.output_shapes(input_shapes)
        if self.tops and len(shapes) != len(self.tops):
            raise ValueError(f"gives {len(shapes)} blobs for {len(self.tops)} tops")
        names = self.tops or [str(i) for i in range(len(shapes))]
        return [check_shape(s, f"blob {t!r}") for t, s in zip(names, shapes, strict=True)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The numpy reference: the CPU path and the ground truth for the GPU shaders."""
        raise NotImplementedError(f"{self.type_name} has no CPU forward")

    # -- the Vulkan path (types with ``gpu = True``) ---------------------------------------

    def supports(self, input_shapes: list[Shape]) -> bool:
        """False sends this layer to its CPU reference for these shapes."""
        return True

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        """The pipelines ``record`` dispatches, by key (independent of blob shapes)."""
        raise NotImplementedError(f"{self.type_name} has no GPU path")

    def background_pipelines(self, target: GpuTarget) -> frozenset[str]:
        """Keys of :meth:`pipeline_specs` that ``load_model`` does not wait for: faster
        alternatives that ``record`` uses once built (``ctx.has_pipeline``)."""
        return frozenset()

    def gpu_weights(self, target: GpuTarget) -> dict[str, np.ndarray]:
        """The arrays to upload, by the name ``record`` asks ``ctx.weight`` for."""
        return {}

    def background_weights(
        self, target: GpuTarget, pipelines: frozenset[str]
    ) -> dict[str, np.ndarray]:
        """Arrays only the background pipelines read: made and uploaded after the load, before
        those pipelines are handed over (``ctx.weight`` has them once ``ctx.has_pipeline``).
        ``pipelines`` are the background pipelines chosen at load, which decide."""
        return {}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        """Record this layer's dispatches for these blobs."""
        raise NotImplementedError(f"{self.type_name} has no GPU path")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} {self.bottoms} -> {self.tops}>"


class ShareInputOnGpu(Layer):
    """A layer whose GPU outputs are its inputs' bytes (contiguous layouts make it free)."""

    gpu = True
    alias = True

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        return {}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        raise AssertionError("alias layers are never recorded")


def _check_count(type_name: str, verb: str, kind: str, accepted: BlobCount, got: int) -> None:
    low, high = accepted
    if low <= got and (high is None or got <= high):
        return
    if high == low:
        bound = f"{low}"
    elif high is None:
        bound = f"at least {low}"
    elif low == 0:
        bound = f"at most {high}"
    else:
        bound = f"{low} to {high}"
    plural = "" if (high if high is not None else low) == 1 else "s"
    raise ValueError(f"{type_name} {verb} {bound} {kind} blob{plural}, got {got}")
