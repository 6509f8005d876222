"""ShaderChoices: which shaders layers record with on a device, as data.

A layer that has several shaders for one job (a tiled or a GEMM convolution, Winograd, a
workgroup per line) asks its device's choices, which travel on the ``GpuInfo`` that the load
and every plan of one model read: a choice cannot change between the pipelines a load builds
and the commands a plan records. The defaults are what the benchmarks measured fastest;
``Option(shader_choices=...)`` gives a Net others (tests, benchmarks comparing two shaders).

A place is "cpu" (CPU devices such as lavapipe), "gpu" (the others, where the layer's own
bounds also hold), "always" (every layer and output the shader can take) or "never".
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Literal

Place = Literal["cpu", "gpu", "always", "never"]
PLACES = ("cpu", "gpu", "always", "never")


@dataclass(frozen=True)
class ShaderChoices:
    """Where each alternative shader runs, and the few sizes measured per device kind."""

    #: convolution_tiled.comp (and deconvolution_tiled, and depthwise's flat layout)
    conv_tiled: Place = "cpu"
    #: convolution_tiled.comp's lanes hand a tap's weights on by subgroupShuffle
    conv_shared_weights: bool = True
    #: output columns per invocation of convolutiondepthwise.comp's flat layout: 4 or 8
    depthwise_flat_columns: int = 8
    #: convolution_splitk.comp for small outputs
    conv_splitk: Place = "gpu"
    #: convolution_gemm.comp for large outputs
    conv_gemm: Place = "gpu"
    #: the fewest steps of 16 taps in one split of convolution_gemm.comp
    conv_gemm_fewest_steps: int = 4
    #: convolution_gemm_coopmat.comp where fp16 arithmetic and matrix units allow ("gpu"), or
    #: "never"
    conv_gemm_coopmat: Place = "gpu"
    #: Winograd F(4x4, 3x3) for 3x3 stride-1 convolutions
    conv_winograd: Place = "cpu"
    #: gemm_tiled.comp for MatMul, Gemm and attention products
    gemm_tiled: Place = "cpu"
    #: gemm_tiled.comp loads four k at once where both operands run along k
    gemm_vec4_loads: bool = True
    #: gemm.comp's most ranges of k per 4x4 block
    gemm_most_splits: int = 4
    #: a workgroup per line for long reductions (softmax_lines.comp, pooling_global.comp)
    line_shaders: Place = "gpu"
    #: a Concat of few runs as buffer copies
    concat_copies: Place = "cpu"
    #: binary_flat.comp for operands that walk memory in order
    binary_flat: Place = "cpu"
    #: InnerProduct's outputs laid out flat along x
    innerproduct_flat: Place = "cpu"
    #: Pooling's outputs laid out flat along x
    pooling_flat: Place = "cpu"

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.type == "Place" and value not in PLACES:
                raise ValueError(f"ShaderChoices.{f.name} must be one of {PLACES}, got {value!r}")
        if self.depthwise_flat_columns not in (4, 8):
            raise ValueError(
                f"ShaderChoices.depthwise_flat_columns must be 4 or 8, got "
                f"{self.depthwise_flat_columns}"
            )
        for name in ("conv_gemm_fewest_steps", "gemm_most_splits"):
            if getattr(self, name) < 1:
                raise ValueError(f"ShaderChoices.{name} must be at least 1")
