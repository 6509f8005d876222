"""Which shader an ungrouped convolution runs on a device: ``convolution_tiled.comp`` on CPU
devices; on GPUs ``convolution_splitk.comp`` for small output maps, ``convolution_gemm.comp``
for large ones with enough channels and taps, else ``convolution.comp`` (one output per
invocation).

The tiled shader computes 8 channels x 8 columns per invocation from weights repacked as vec4
blocks, its 8 lanes sharing each tap's weights by subgroupShuffle: 4-8x faster on lavapipe,
where every per-lane load is a scalar loop, and 1.5-9x slower on an H100, which wants one
invocation per output for occupancy.

The split-K shader gives a subgroup 4 outputs of one channel, its lanes splitting the input
channels and summing with subgroupAdd. The one-output shader gives a 7x7x512 layer 25k
invocations, each a chain of 4608 dependent multiply-adds: too little work in flight for a GPU.
The rule comes from a per-layer GPU timing of both shaders on the H100 (2026-11-23, 7 models,
``benchmarks/conv_shaders.py``, ``results/splitk_layers_h100.json``): 1x1 layers win 1.2-5x on
maps up to 22x22, 3x3 and 5x5 ones up to 14x14 with few outputs; every larger map loses, up to
8x (vgg16's 224x224). A layer with enough taps gets both pipelines at load; the plan picks one
by its output when it records.

The implicit-GEMM shader stages 64 channels x 64 pixels x 16 taps in shared memory; each
invocation accumulates 4 x 4 outputs, and a layer whose output makes too few 64 x 64 tiles to
fill the GPU splits its taps over workgroups (a second pass adds the parts). Timing 115
distinct layers of 10 models with every shader on the H100 (2026-11-23,
``benchmarks/conv_shaders.py``, ``results/conv_shaders_h100.json``), it won wherever a
layer has work enough to hide its fixed 13-35 us: from 2M multiply-adds for 1x1 kernels and
4M for larger ones (vgg16's 3x3 layers 3.7-5.9x faster, resnet50's 1x1 and 3x3 ones 2.5-6x);
that rule costs 0.7% over picking the faster shader per layer, and 47% less than never using
it. A layer of fewer than 16 output channels wastes most of a tile."""

from __future__ import annotations

import math

import numpy as np

from ..gpu._info import GpuInfo
from ..shader._options import ShaderOptions
from ._device_choice import FLAT_LOCAL, has_subgroup_shuffles

# Where each shader runs is the device's ShaderChoices (``info.choices``, gpu/_shader_choices):
# conv_tiled, the tiled shader for ungrouped convolutions ("cpu"); conv_shared_weights, whether
# convolution_tiled.comp's lanes load one weight each and hand them on by subgroupShuffle (spec
# constant 13) instead of each loading all 8 of a tap, where the subgroups allow it (measured
# 2026-11-27 on lavapipe: mobilenet 0.845x, mobilenet_v3 0.936x); depthwise_flat_columns, the
# output columns an invocation of convolutiondepthwise.comp computes in its flat layout (CPU
# devices; GPUs' layout keeps 4): measured 2026-11-27 on lavapipe, each model's layers by kind,
# 8 against 4: 3x3 stride 1 0.74-0.86x, stride 2 0.83-0.92x; 5x5 stride 1 0.50-0.52x, stride 2
# 0.57-0.85x (mobilenet_v2, efficientnet_b0, mnasnet, mobilenet_v3).
DEPTHWISE_COLUMNS = 4  # output columns per invocation of convolutiondepthwise.comp's 2-D layout
TILE_OC = 8  # output channels per invocation in convolution_tiled.comp
TILE_OX = 8  # output columns per invocation in convolution_tiled.comp
DECONV_TILE_OX = 4  # output columns (of one stride phase) per invocation in deconvolution_tiled
#: the tiled shaders' workgroup, column blocks of the map in row-major order along x: llvmpipe
#: runs 8 invocations per SIMD step along x, so an (8, 8) tile of blocks x rows left 6 of 8 lanes
#: idle on a 7x7 map (resnet18's 7x7 layers took 63 ms, now 8-13). 8, 16 and 64 wide took the
#: same CPU time on resnet18 (268-272 ms, lavapipe); 8 wastes least on small maps.
TILED_LOCAL = FLAT_LOCAL

# conv_splitk: "gpu" (devices that are not CPUs and have subgroup arithmetic), "always" (any
# layer, any output) or "never".
#: (taps per output, largest map h*w, most outputs) for 1x1 kernels and for larger ones
SPLITK_POINTWISE = (64, 512, 150_000)
SPLITK_SPATIAL = (400, 196, 25_088)
LOCAL = (64, 1, 1)
# conv_gemm: "gpu" (devices that are not CPUs), "always" (any layer, any output) or "never".
#: (fewest taps per output, fewest output channels) for a layer to get the GEMM pipeline
GEMM_BOUNDS = (16, 16)
#: fewest multiply-adds (output channels x pixels x taps) for a plan to record the GEMM
#: shader: 1x1 kernels, larger ones
GEMM_WORK = (2_000_000, 4_000_000)
GEMM_LOCAL = (256, 1, 1)
GEMM_TILE = 64  # output channels and output pixels per workgroup
GEMM_STEP = 16  # taps per step of convolution_gemm.comp
#: workgroups that keep the H100 busy (two per multiprocessor); a layer with fewer output tiles
#: splits its taps into up to GEMM_MOST_SPLITS parts of at least the choices'
#: conv_gemm_fewest_steps steps
GEMM_BUSY = 264
GEMM_MOST_SPLITS = 16
SUM_LOCAL = (256, 1, 1)
PIXELS = 4  # output pixels per subgroup
_SUBGROUP_FEATURE_ARITHMETIC = 0x4


#: fewest output channels per group for a grouped layer to run convolution_tiled.comp: each
#: group's channels are padded to 8, so fewer than 4 would waste most of every invocation
TILED_FEWEST_PER_GROUP = 4


def tiled(info: GpuInfo) -> bool:
    """Whether a layer that the tiled shader can run does so on ``info``'s device."""
    return info.takes(info.choices.conv_tiled)


def tiled_convolution(info: GpuInfo) -> bool:
    """Whether convolution_tiled.comp runs on ``info``'s device: :func:`tiled`, where compute
    shaders may shuffle (the shader declares it)."""
    return tiled(info) and has_subgroup_shuffles(info)


def shared_weights(info: GpuInfo) -> bool:
    """Whether convolution_tiled.comp's lanes share a tap's weights by subgroupShuffle on
    ``info``'s device (specialization constant 13): its choices' conv_shared_weights, and
    subgroups that always hold a whole 8-lane workgroup (lavapipe on a 128-bit host has 4-lane
    ones)."""
    smallest = info.min_subgroup_size or info.subgroup_size
    # the workgroup is one channel block's lanes: lane l loads the block's channel l
    assert TILED_LOCAL[0] == TILE_OC
    return info.choices.conv_shared_weights and smallest >= TILED_LOCAL[0]


def tiled_groups(output: tuple[int, ...], group: int = 1) -> tuple[int, int, int]:
    """Workgroups (column blocks of the whole map, 1, channel blocks of every group)."""
    oc, oh, ow = output
    blocks = math.ceil(math.ceil(ow / TILE_OX) * oh / TILED_LOCAL[0])
    return (blocks, 1, group * math.ceil(oc // group / TILE_OC))


def deconv_tiled_groups(output: tuple[int, ...], strides: tuple[int, int]) -> tuple[int, int, int]:
    """Workgroups for deconvolution_tiled.comp: (blocks of 4 columns of one phase over every
    phase and row, 1, channel blocks) for ``output`` and (stride_h, stride_w)."""
    oc, oh, ow = output
    sh, sw = strides
    blocks = math.ceil(math.ceil(ow / sw) / DECONV_TILE_OX) * math.ceil(oh / sh) * sh * sw
    return (math.ceil(blocks / TILED_LOCAL[0]), 1, math.ceil(oc / TILE_OC))


def pack_tiled(weight: np.ndarray, out_c: int, maxk: int, group: int = 1) -> np.ndarray:
    """(out_c, in_c per group, kh, kw) weights as the tiled shader reads them:
    [group][out_c per group / 8][in_c per group][maxk][8], the 8 channels of one tap two
    consecutive vec4 (each group's out_c padded with zeros)."""
    out_g = out_c // group
    in_g = weight.size // (out_c * maxk)
    padded = -(-out_g // TILE_OC) * TILE_OC
    packed = np.zeros((group, padded, in_g, maxk), np.float32)
    packed[:, :out_g] = weight.reshape(group, out_g, in_g, maxk)
    blocks = packed.reshape(group, padded // TILE_OC, TILE_OC, in_g, maxk)
    return np.ascontiguousarray(blocks.transpose(0, 1, 3, 4, 2)).reshape(-1)


def bounds(kernel_w: int, kernel_h: int) -> tuple[int, int, int]:
    return SPLITK_POINTWISE if kernel_w == kernel_h == 1 else SPLITK_SPATIAL


def offered(info: GpuInfo, taps: int, kernel: tuple[int, int]) -> bool:
    """Whether an ungrouped float layer with ``taps`` per output gets the split-K pipeline."""
    place = info.choices.conv_splitk
    if place == "never":
        return False
    size = info.subgroup_size
    usable = bool(info.subgroup_operations & _SUBGROUP_FEATURE_ARITHMETIC) and (
        PIXELS <= (info.min_subgroup_size or size) and max(info.max_subgroup_size, size) <= LOCAL[0]
    )
    if not usable:
        return False
    if place == "always":
        return True
    return info.takes(place) and taps >= bounds(*kernel)[0]


def chosen(info: GpuInfo, output: tuple[int, ...], kernel: tuple[int, int]) -> bool:
    """Whether a layer that was offered it records ``output`` (c, h, w) with the split-K shader."""
    oc, oh, ow = output
    _, most_pixels, most_outputs = bounds(*kernel)
    small = oh * ow <= most_pixels and oc * oh * ow <= most_outputs
    return info.choices.conv_splitk == "always" or small


def groups(info: GpuInfo, output: tuple[int, ...]) -> int:
    """Workgroups along x for ``output``: one subgroup per PIXELS outputs of one channel."""
    oc, oh, ow = output
    subgroups = max(1, LOCAL[0] // info.subgroup_size)
    return math.ceil(oc * math.ceil(oh * ow / PIXELS) / subgroups)


def gemm_offered(info: GpuInfo, taps: int, channels: int) -> bool:
    """Whether an ungrouped float layer gets the implicit-GEMM pipeline beside the others."""
    place = info.choices.conv_gemm
    if place in ("never", "always"):
        return place == "always"
    fewest_taps, fewest_channels = GEMM_BOUNDS
    return info.takes(place) and taps >= fewest_taps and channels >= fewest_channels


# conv_gemm_coopmat: convolution_gemm_coopmat.comp replaces convolution_gemm.comp where the net
# asked for fp16 arithmetic and the device has the matrix units; "never" keeps the fp32 shader.
#: the subgroup size convolution_gemm_coopmat.comp is written for (its SUBGROUP_SIZE: 8
#: subgroups share a tile's 16 blocks); a device that varies its size would break the split
COOPMAT_SUBGROUP = 32


def gemm_coopmat(options: ShaderOptions, info: GpuInfo) -> bool:
    """Whether a layer's GEMM pipeline is the matrix-unit shader: fp16 operands (the net asked
    for fp16 arithmetic, and ``options`` holds it only where the device has it) multiplied into
    fp32 sums, on a device with 16 x 16 fp16 blocks and a fixed subgroup of 32."""
    return (
        info.choices.conv_gemm_coopmat != "never"
        and options.use_fp16_arithmetic
        and info.support_cooperative_matrix
        and info.subgroup_size == info.min_subgroup_size == info.max_subgroup_size
        and info.subgroup_size == COOPMAT_SUBGROUP
    )


def gemm_chosen(info: GpuInfo, output: tuple[int, ...], kernel: tuple[int, int], taps: int) -> bool:
    """Whether a layer that was offered it records ``output`` (c, h, w) with the GEMM shader."""
    oc, oh, ow = output
    fewest = GEMM_WORK[0] if kernel == (1, 1) else GEMM_WORK[1]
    return info.choices.conv_gemm == "always" or oc * oh * ow * taps >= fewest


def gemm_groups(output: tuple[int, ...], splits: int = 1) -> tuple[int, int, int]:
    """Workgroups (pixel tiles, channel tiles, splits) for ``output``."""
    oc, oh, ow = output
    return (math.ceil(oh * ow / GEMM_TILE), math.ceil(oc / GEMM_TILE), splits)


def gemm_split_taps(info: GpuInfo, output: tuple[int, ...], taps: int) -> int:
    """Taps per split for ``output``: all of them when its tiles already fill the GPU."""
    pixel_tiles, channel_tiles, _ = gemm_groups(output)
    steps = math.ceil(taps / GEMM_STEP)
    wanted = math.ceil(GEMM_BUSY / (pixel_tiles * channel_tiles))
    fewest_steps = info.choices.conv_gemm_fewest_steps
    splits = max(1, min(wanted, GEMM_MOST_SPLITS, steps // fewest_steps))
    return math.ceil(steps / splits) * GEMM_STEP


# conv_winograd: where 3x3 stride-1 convolutions run Winograd F(4x4, 3x3)
# (``convolution_winograd_*.comp``): "cpu" devices, "always" (any device) or "never".
#: the smallest harmonic mean of a layer's input and output channels (2 x in x out / (in + out))
#: for it to run Winograd: its transforms cost per input and per output channel, its savings grow
#: with their product. Timing the 76 distinct 3x3 stride-1 layers of 10 models both ways on
#: lavapipe (``benchmarks/winograd_layers.py``, ``results/winograd_layers_lavapipe.json``):
#: from 64 (64 -> 64) Winograd won 39 of 46 at 0.18-0.97x; the 7 it lost (1.05-2.7x, 7.8 ms
#: in all) have maps of 7x7 or of 16 pixels or fewer, and one 28x28. Below 64 it lost 26 of 30
#: (cunet's and the RRDB's 16-48 channels, vgg16's first layer, 3 -> 64: 1.1-5.5x).
WINOGRAD_FEWEST_CHANNELS = 64
WINOGRAD_TILE = 4  # output pixels per tile side: F(4x4, 3x3) reads 6x6 input tiles
WINOGRAD_POSITIONS = 36
WINOGRAD_LOCAL = FLAT_LOCAL
#: F(4x4, 3x3)'s weight transform G (6 x 3): the points 0, 1, -1, 2, -2 and infinity
_WINOGRAD_G = np.array(
    [
        [1 / 4, 0, 0],
        [-1 / 6, -1 / 6, -1 / 6],
        [-1 / 6, 1 / 6, -1 / 6],
        [1 / 24, 1 / 12, 1 / 6],
        [1 / 24, -1 / 12, 1 / 6],
        [0, 0, 1],
    ],
    np.float32,
)


#: U = G g G^T for every 3 x 3 g at once: U[a * 6 + b] = sum over i, j of
#: G[a, i] G[b, j] g[i * 3 + j]
_WINOGRAD_TRANSFORM = np.einsum("ai,bj->abij", _WINOGRAD_G, _WINOGRAD_G).reshape(36, 9)


def winograd(info: GpuInfo, kernel: tuple[int, int], stride: tuple[int, int],
             dilation: tuple[int, int], in_c: int, out_c: int) -> bool:  # fmt: skip
    """Whether an ungrouped float layer runs the Winograd passes on ``info``'s device."""
    place = info.choices.conv_winograd
    if place == "never" or kernel != (3, 3) or stride != (1, 1) or dilation != (1, 1):
        return False
    if place == "always":
        return True
    harmonic = 2 * in_c * out_c / (in_c + out_c)
    return harmonic >= WINOGRAD_FEWEST_CHANNELS and info.takes(place)


def winograd_tiles(outh: int, outw: int) -> tuple[int, int, int]:
    """(tiles per row, tiles, tiles padded to a multiple of 8) of an ``outh`` x ``outw`` map."""
    tiles_w = math.ceil(outw / WINOGRAD_TILE)
    tiles = tiles_w * math.ceil(outh / WINOGRAD_TILE)
    return tiles_w, tiles, -(-tiles // 8) * 8


def pack_winograd(weight: np.ndarray, out_c: int, in_c: int) -> np.ndarray:
    """(out_c, in_c, 3, 3) weights transformed (G g G^T, 6 x 6 each) and laid out as
    convolution_winograd_gemm.comp reads them: [36][out_c / 8][in_c][8] (out_c padded with
    zeros to a multiple of 8). One matrix product (36 x 9 by 9 x everything) writes the layout
    directly: vgg16's 512 x 512 layer in a fraction of the 71 ms two tensordots and a transpose
    took."""
    padded = -(-out_c // TILE_OC) * TILE_OC
    g = np.zeros((padded, in_c, 9), np.float32)
    g[:out_c] = np.asarray(weight, np.float32).reshape(out_c, in_c, 9)
    taps = g.reshape(padded // TILE_OC, TILE_OC, in_c, 9).transpose(3, 0, 2, 1)
    return (_WINOGRAD_TRANSFORM @ taps.reshape(9, -1)).reshape(-1)
