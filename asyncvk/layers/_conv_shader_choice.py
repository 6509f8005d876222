"""ConvShaderChoice: which of its shaders a Convolution layer builds and records with on a
device (the direct, tiled or depthwise shader, split-K, the implicit GEMM, Winograd), from its
params and the device's choices in ``_conv_shaders``. The Convolution types inherit it, so that
their module keeps the numpy reference, the pipelines they declare and what they record.
"""

from __future__ import annotations

from collections.abc import Callable

from ..gpu._info import GpuInfo
from . import _conv_shaders
from ._base import Shape
from ._conv_params import ConvParams

#: the implicit-GEMM pipelines, built in the background (see ``background_pipelines``)
_GEMM_KEYS = frozenset({"conv_gemm", "conv_gemm_sum"})
#: the Winograd passes, built in the background too
_WINOGRAD_KEYS = frozenset({"wino_in", "wino_gemm", "wino_out"})


class ConvShaderChoice(ConvParams):
    """The choices among a Convolution's shaders, read from its params and the device."""

    def _winograd(self, info: GpuInfo) -> bool:
        """Whether this layer runs the three Winograd F(4x4, 3x3) passes (3x3 kernels at stride
        1, undilated, ungrouped, float) instead of one convolution shader."""
        if self.group != 1 or self.int8_requested:
            return False
        return _conv_shaders.winograd(
            info,
            (self.kernel_w, self.kernel_h),
            (self.stride_w, self.stride_h),
            (self.dilation_w, self.dilation_h),
            self.taps // self.maxk,
            self.num_output,
        )

    def _tiled(self, info: GpuInfo) -> bool:
        """Ungrouped layers, and grouped ones with enough output channels per group (not
        depthwise ones: convolutiondepthwise.comp), on the devices the tiled shader wins on
        and can run on (subgroupShuffle: :func:`_conv_shaders.tiled_convolution`)."""
        per_group = self.num_output // self.group
        fits = self.group == 1 or per_group >= _conv_shaders.TILED_FEWEST_PER_GROUP
        return fits and _conv_shaders.tiled_convolution(info)

    def _flat_columns(self, info: GpuInfo) -> bool:
        """Whether convolutiondepthwise.comp lays its column blocks out flat, one row after
        another along x (see the shader), as the tiled shader does: on the same devices."""
        return _conv_shaders.tiled(info)

    def _splitk(self, info: GpuInfo) -> bool:
        """Whether this layer also gets convolution_splitk.comp (used when the output is small):
        any grouping that runs convolution.comp (shufflenet's grouped 1x1 layers gave it 240
        invocations on a 7x7 map, 0.07 ms each on the H100)."""
        if self.int8_requested or self.shader(info)[0] != "convolution":
            return False
        return _conv_shaders.offered(info, self.taps, (self.kernel_w, self.kernel_h))

    def _gemm(self, info: GpuInfo) -> bool:
        """Whether this layer also gets convolution_gemm.comp (used when the output is large)."""
        if self.group != 1 or self.int8_requested or self._tiled(info) or self._winograd(info):
            return False
        return _conv_shaders.gemm_offered(info, self.taps, self.num_output)

    def _path(self, info: GpuInfo, output: Shape, built: Callable[[str], bool]) -> str:
        """Which pipelines a plan records ``output`` with, of those ``built`` (chosen at load
        and built by now): "winograd", "gemm" (before split-K: a 1x1 layer of 2048 channels on
        a 7x7 map ran in 0.03 ms with it against 0.29 ms), "splitk" or "conv"."""
        if all(map(built, _WINOGRAD_KEYS)):  # chosen only where Winograd runs
            return "winograd"
        kernel = (self.kernel_w, self.kernel_h)
        if all(map(built, _GEMM_KEYS)) and _conv_shaders.gemm_chosen(
            info, output, kernel, self.taps
        ):
            return "gemm"
        if built("conv_splitk") and _conv_shaders.chosen(info, output, kernel):
            return "splitk"
        return "conv"

    def shader(self, info: GpuInfo) -> tuple[str, int, int]:
        """The shader, and the output columns and channels one invocation computes."""
        if self._tiled(info):
            return ("convolution_tiled", _conv_shaders.TILE_OX, _conv_shaders.TILE_OC)
        return ("convolution", 1, 1)
