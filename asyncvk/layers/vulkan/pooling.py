"""Pooling on the GPU (``pooling.comp``), with ncnn's pad modes worked out on the host."""

from __future__ import annotations

import math

from .._vulkan import GpuBlob, PipelineSpec, RecordContext, VulkanLayer, pack_push
from .._vulkan import vulkan_layer as register


@register("Pooling")
class Pooling(VulkanLayer):
    def setup(self) -> None:
        pd = self.params
        self.pooling_type = pd.get_int(0, 0)
        self.kernel_w = pd.get_int(1, 0)
        self.kernel_h = pd.get_int(11, self.kernel_w)
        self.stride_w = pd.get_int(2, 1)
        self.stride_h = pd.get_int(12, self.stride_w)
        self.pad_left = pd.get_int(3, 0)
        self.pad_right = pd.get_int(14, self.pad_left)
        self.pad_top = pd.get_int(13, self.pad_left)
        self.pad_bottom = pd.get_int(15, self.pad_top)
        self.global_pooling = pd.get_int(4, 0)
        self.pad_mode = pd.get_int(5, 0)
        self.count_include_pad = pd.get_int(6, 0)
        self.adaptive = pd.get_int(7, 0)

    def supports(self, input_shapes: list[tuple[int, ...]]) -> bool:  # type: ignore[override]
        return len(input_shapes[0]) == 3 and self.pooling_type in (0, 1)

    def pipeline_specs(self) -> dict[str, PipelineSpec]:
        # ncnn excludes only the pads named by params (and the full mode's tail); SAME modes
        # compute their pads, which it then counts, so they divide by the kernel area.
        include = 1 if self.pad_mode in (2, 3) else self.count_include_pad
        spec = (self.pooling_type, include, self.adaptive)
        return {"pool": PipelineSpec("pooling", spec, (8, 8, 1))}

    def _pads(self, w: int, h: int) -> tuple[int, int, int, int]:
        """(left, top, right, bottom) as ncnn's make_padding; tail pads are not counted."""
        if self.pad_mode in (2, 3):
            wpad = self.kernel_w + (w - 1) // self.stride_w * self.stride_w - w
            hpad = self.kernel_h + (h - 1) // self.stride_h * self.stride_h - h
            wpad, hpad = max(wpad, 0), max(hpad, 0)
            if self.pad_mode == 2:
                return (wpad // 2, hpad // 2, wpad - wpad // 2, hpad - hpad // 2)
            return (wpad - wpad // 2, hpad - hpad // 2, wpad // 2, hpad // 2)
        return (self.pad_left, self.pad_top, self.pad_right, self.pad_bottom)

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        c, h, w = inputs[0].shape
        out = outputs[0].shape
        if self.global_pooling:
            kw, kh, sw, sh = w, h, 1, 1
            pads = (0, 0, 0, 0)
            ow = oh = 1
        else:
            kw, kh, sw, sh = self.kernel_w, self.kernel_h, self.stride_w, self.stride_h
            pads = self._pads(w, h)
            oh, ow = (out[1], out[2]) if len(out) == 3 else (1, 1)
        push = pack_push("13i", w, h, c, ow, oh, kw, kh, sw, sh, *pads)
        groups = (math.ceil(ow / 8), math.ceil(oh / 8), c)
        ctx.dispatch("pool", [inputs[0], outputs[0]], push, groups)
