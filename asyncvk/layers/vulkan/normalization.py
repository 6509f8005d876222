"""Per-channel affine GPU layers on ``channel_affine.comp``: BatchNorm (folded on the host into
scale and bias), Scale, Bias and PReLU."""

from __future__ import annotations

import math

import numpy as np

from ...gpu._memory import Buffer
from .._vulkan import GpuBlob, PipelineSpec, RecordContext, VulkanLayer, pack_push
from .._vulkan import vulkan_layer as register


class _ChannelAffine(VulkanLayer):
    mode = 0
    has_bias = 1

    def per_channel(self) -> int:
        return 1

    def pipeline_specs(self) -> dict[str, PipelineSpec]:
        spec = (self.mode, self.has_bias, self.per_channel())
        return {"affine": PipelineSpec("channel_affine", spec, self.local_size_1d())}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        shape = inputs[0].shape
        n = inputs[0].size
        if len(shape) == 1:
            plane, channels = 1, shape[0]
        else:
            plane, channels = math.prod(shape[1:]), shape[0]
        push = pack_push("3i", n, plane, channels)
        bufs: list[Buffer | GpuBlob] = [
            inputs[0],
            outputs[0],
            ctx.weight("scale"),
            ctx.weight("bias"),
        ]
        ctx.dispatch("affine", bufs, push, self.groups_1d(n, self.local_size_1d()))


@register("BatchNorm")
class BatchNorm(_ChannelAffine):
    def setup(self) -> None:
        self.eps = self.params.get_float(1, 0.0)

    def weights(self) -> dict[str, np.ndarray]:
        slope, mean, var, bias = (np.asarray(a, np.float64) for a in self.weight_data[:4])
        sqrt_var = np.sqrt(var + self.eps)
        a = slope / sqrt_var
        return {
            "scale": a.astype(np.float32),
            "bias": (bias - slope * mean / sqrt_var).astype(np.float32),
        }


@register("Scale")
class Scale(_ChannelAffine):
    def setup(self) -> None:
        self.scale_data_size = self.params.get_int(0, 0)
        self.has_bias = self.params.get_int(1, 0)

    def supports(self, input_shapes: list[tuple[int, ...]]) -> bool:  # type: ignore[override]
        return self.scale_data_size != -233 and len(input_shapes) == 1

    def weights(self) -> dict[str, np.ndarray]:
        bias = self.weight_data[1] if self.has_bias else np.zeros(1, np.float32)
        return {"scale": self.weight_data[0], "bias": bias}


@register("Bias")
class Bias(_ChannelAffine):
    def weights(self) -> dict[str, np.ndarray]:
        bias = self.weight_data[0]
        return {"scale": np.ones_like(bias), "bias": bias}


@register("PReLU")
class PReLU(_ChannelAffine):
    mode = 1
    has_bias = 0

    def setup(self) -> None:
        self.num_slope = self.params.get_int(0, 0)

    def per_channel(self) -> int:
        return 1 if self.num_slope > 1 else 0

    def weights(self) -> dict[str, np.ndarray]:
        return {"scale": self.weight_data[0], "bias": np.zeros(1, np.float32)}
