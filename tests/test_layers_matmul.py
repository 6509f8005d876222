"""Gemm (and MatMul) against ncnn itself: the same .param/.bin through the ncnn wheel's CPU fp32
and through asyncvk's GPU path (which must not fall back to the CPU) and its CPU path."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from ncnn_oracle import (
    Model,
    assert_gpu_and_cpu_match_ncnn,
    asyncvk_forward,
    tagged,
    write_model,
)

from asyncvk import Net
from asyncvk._errors import ModelFormatError
from asyncvk.gpu import VulkanDevice
from asyncvk.gpu._shader_choices import Place, ShaderChoices

RNG = np.random.default_rng(15)


@dataclass(frozen=True)
class GemmCase:
    """One Gemm layer: its params, its input blob shapes and its constant operands' shapes
    (in ncnn's load order A, B, C)."""

    params: str
    inputs: list[tuple[int, ...]]
    weights: list[tuple[int, ...]] = field(default_factory=list)

    @property
    def id(self) -> str:
        shapes = "+".join("x".join(map(str, s)) for s in self.inputs)
        return f"{self.params.replace(' ', ',') or 'default'}@{shapes or 'none'}"


GEMM_CASES = [
    # two input blobs, every transpose, alpha and beta
    GemmCase("", [(5, 7), (7, 6)]),
    GemmCase("2=1", [(7, 5), (7, 6)]),
    GemmCase("3=1", [(5, 7), (6, 7)]),
    GemmCase("0=0.5 2=1 3=1", [(7, 5), (6, 7)]),
    # a C blob: each broadcast ncnn infers from its shape, beta and alpha on it
    GemmCase("0=1.5 1=0.25", [(5, 7), (7, 6), (1,)]),
    GemmCase("1=2", [(5, 7), (7, 6), (5,)]),
    GemmCase("", [(5, 7), (7, 6), (6,)]),
    GemmCase("", [(5, 7), (7, 6), (5, 1)]),
    GemmCase("1=-1", [(5, 7), (7, 6), (5, 6)]),
    GemmCase("", [(5, 7), (7, 6), (1, 6)]),
    GemmCase("", [(6, 7), (7, 6), (6,)]),  # M == N: a 1-D C of that length is per column
    GemmCase("", [(5, 7), (7, 6), (2, 3, 4)]),  # fits no broadcast: its first value
    # output layouts
    GemmCase("14=1", [(5, 7), (7, 6), (5, 6)]),
    GemmCase("11=1", [(5, 7), (7, 6)]),
    GemmCase("11=1 14=1", [(5, 7), (7, 6)]),
    GemmCase("12=1 13=1", [(5, 7), (7, 6)]),
    # 1-D and 3-D (one row per channel) operands, K of 1
    GemmCase("", [(7,), (7, 6)]),
    GemmCase("3=1", [(5, 1, 7), (6, 1, 7)]),
    GemmCase("", [(5, 2, 7), (7, 6)]),  # ncnn reads the first row of each channel
    GemmCase("2=1 3=1", [(7, 2, 5), (6, 3, 7)]),
    GemmCase("", [(3, 5, 1, 7), (7, 6)]),  # and the first (d, h) rows of a 4-D blob
    GemmCase("", [(5, 1), (1, 6)]),
    # constant operands: B (vision_transformer's Linear), A, both; every constant C type
    *[
        GemmCase(f"3=1 5=1 6=1 7=5 8=6 9=7 10={t}", [(5, 7)], [(6, 7), c])
        for t, c in ((0, (1,)), (1, (5,)), (2, (5, 1)), (3, (5, 6)), (4, (1, 6)))
    ],
    GemmCase("3=1 5=1 6=1 8=6 9=7 10=-1", [(5, 7)], [(6, 7)]),
    GemmCase("0=0.5 1=3 5=1 8=6 9=7", [(5, 7), (5, 6)], [(7, 6)]),
    GemmCase("2=1 4=1 7=5 9=7", [(7, 6)], [(7, 5)]),
    GemmCase("4=1 5=1 7=5 8=6 9=7", [(5, 6)], [(5, 7), (7, 6)]),
    GemmCase("4=1 5=1 6=1 7=5 8=6 9=7 10=3", [], [(5, 7), (7, 6), (5, 6)]),
    # sizes past one workgroup's 32x32 block, odd edges
    GemmCase("3=1 5=1 6=1 8=37 9=19 10=4", [(45, 19)], [(37, 19), (1, 37)]),
    # gemm_tiled.comp: past its 32x64 tile with ragged edges, K of whole 8-chunks and with a
    # tail of each length, transposes, C before and after the alpha
    GemmCase("2=1 3=1 1=0.5", [(23, 70), (67, 23), (70, 67)]),
    GemmCase("0=2", [(33, 16), (16, 130)]),
    *[GemmCase("3=1", [(35, k), (66, k)]) for k in (1, 2, 3, 4, 5, 6, 7)],
    GemmCase("14=1", [(40, 9), (9, 65), (40, 65)]),
    # gemm_tiled.comp's vec4 path (k along memory in A and B, K a multiple of 4): several steps
    # of 4, a Linear with its bias past the tile's edges, C with alpha and beta
    GemmCase("3=1", [(35, 12), (66, 12)]),
    GemmCase("3=1 5=1 6=1 8=37 9=20 10=4", [(45, 20)], [(37, 20), (1, 37)]),
    GemmCase("0=0.5 1=2 3=1", [(9, 8), (70, 8), (9, 70)]),
]


def _gemm_model(tmp_path: Path, case: GemmCase) -> tuple[Model, dict[str, np.ndarray]]:
    names = [f"in{i}" for i in range(len(case.inputs))]
    lines = [f"Input {n} 0 1 {n}" for n in names]
    lines.append(f"Gemm gemm {len(names)} 1 {' '.join(names)} out0 {case.params}")
    text = f"7767517\n{len(lines)} {len(names) + 1}\n" + "\n".join(lines)
    weights = [tagged(RNG.standard_normal(s).astype(np.float32)) for s in case.weights]
    model = write_model(tmp_path, text, weights)
    inputs = {
        n: RNG.standard_normal(s).astype(np.float32)
        for n, s in zip(names, case.inputs, strict=True)
    }
    return model, inputs


#: gemm.comp (the GPUs' shader) on the cases that reach its edges: past its 32x32 block with
#: odd edges, transposes, C before and after alpha, K below one chunk; the tiled shader (the
#: one lavapipe runs) takes every case.
PLAIN_CASES = [
    c for c in GEMM_CASES if any(m > 32 for s in c.inputs for m in s) or "14=1" in c.params
]
GEMM_RUNS = [(c, "always") for c in GEMM_CASES] + [(c, "never") for c in PLAIN_CASES]


@pytest.mark.parametrize(("case", "tiled"), GEMM_RUNS, ids=[f"{c.id}-{t}" for c, t in GEMM_RUNS])
async def test_gemm_matches_ncnn(
    device: VulkanDevice,
    tmp_path: Path,
    case: GemmCase,
    tiled: Place,
) -> None:
    """Both product shaders (gemm_tiled.comp on CPU devices, gemm.comp on GPUs)."""
    from asyncvk.layers import _strided_gemm

    choices = ShaderChoices(gemm_tiled=tiled)
    if tiled == "never":
        assert not _strided_gemm.tiled_gemm_fits(dataclasses.replace(device.info, choices=choices))
    model, inputs = _gemm_model(tmp_path, case)
    await assert_gpu_and_cpu_match_ncnn(model, inputs, "Gemm", choices=choices)


def test_the_tiled_gemm_needs_subgroup_shuffles(device: VulkanDevice) -> None:
    """gemm_tiled.comp hands A between lanes with subgroupShuffle: no shuffles, no tiled GEMM."""
    from asyncvk.layers import _strided_gemm

    info = dataclasses.replace(device.info, choices=ShaderChoices(gemm_tiled="always"))
    info = dataclasses.replace(info, min_subgroup_size=8, max_subgroup_size=8)
    info = dataclasses.replace(info, subgroup_size=8, subgroup_operations=0xFF)
    assert _strided_gemm.tiled_gemm_fits(info)
    assert not _strided_gemm.tiled_gemm_fits(
        dataclasses.replace(info, subgroup_operations=0xFF & ~0x10)
    )


def test_c_after_alpha_needs_a_c(device: VulkanDevice) -> None:
    """gemm_tiled.comp reads has_c and c_last from its push constants: a product recorded with
    c_last and no C (attention without a mask) must not add the unbound C after alpha (the
    softmax after it would hide a constant added to every score)."""
    import struct

    from asyncvk.layers import _strided_gemm

    tiled = dataclasses.replace(device.info, choices=ShaderChoices(gemm_tiled="always"))
    pushes: list[bytes] = []

    class Recorder:
        info = tiled

        def dispatch(self, pipeline: str, buffers: object, push: bytes, groups: object) -> None:
            pushes.append(push)

        def spec(self, key: str) -> object:
            return _strided_gemm.gemm_spec(tiled, True)  # the tiled shader

    op = _strided_gemm.Operand(buffer=None, row=1, col=1)  # type: ignore[arg-type]
    for c in (None, op):
        _strided_gemm.dispatch_gemm(Recorder(), "gemm", (2, 3, 4), op, op, op, c, c_last=True)  # type: ignore[arg-type]
    flags = [struct.unpack_from("2i", push, len(push) - 8) for push in pushes]
    assert flags == [(0, 0), (1, 1)]


async def test_gemm_vec4_loads_give_the_scalar_paths_bits(
    device: VulkanDevice, tmp_path: Path
) -> None:
    """gemm_tiled.comp's vec4 path makes the same products in the same order."""
    model, inputs = _gemm_model(tmp_path, GemmCase("3=1", [(35, 20), (66, 20), (35, 66)]))
    outputs = []
    for vec4 in (True, False):
        choices = ShaderChoices(gemm_tiled="always", gemm_vec4_loads=vec4)
        outputs.append((await asyncvk_forward(model, inputs, ["out0"], choices=choices))[0]["out0"])
    np.testing.assert_array_equal(outputs[0], outputs[1])


def test_gemm_ranges_fit_the_devices_shared_memory(device: VulkanDevice) -> None:
    """gemm.comp sizes its shared arrays by its ranges of k: a device with little shared memory
    gets fewer ranges, never a pipeline that cannot be built (16 KiB is Vulkan's minimum)."""
    import dataclasses

    from asyncvk.layers import _strided_gemm

    def ranges(shared: int) -> int:
        limits = dataclasses.replace(device.info.limits, max_compute_shared_memory_size=shared)
        return _strided_gemm._local(dataclasses.replace(device.info, limits=limits))[2]

    per = _strided_gemm._SHARED_PER_SPLIT
    assert ranges(16384) * per <= 16384 and ranges(16384) >= 1
    assert ranges(49152) == 4 and ranges(4 * per - 1) == 3 and ranges(per - 1) == 1


@pytest.mark.parametrize("splits", [1, 2])
async def test_gemm_with_fewer_ranges_of_k(
    device: VulkanDevice, tmp_path: Path, splits: int
) -> None:
    """gemm.comp with the workgroups a device of little shared memory gets (its arrays sized
    by the ranges) matches ncnn on the case past its blocks with odd edges."""
    choices = ShaderChoices(gemm_tiled="never", gemm_most_splits=splits)
    case = max(PLAIN_CASES, key=lambda c: sum(m for s in c.inputs for m in s))
    model, inputs = _gemm_model(tmp_path, case)
    await assert_gpu_and_cpu_match_ncnn(model, inputs, "Gemm", choices=choices)


BAD_GEMM = [
    ("18=1", "param 18 quantize_term=1"),
    ("2=2", "param 2 transA=2 must be 0 or 1"),
    ("4=1 9=7", "constantM and 9 constantK must be > 0"),
    ("5=1 8=6", "constantN and 9 constantK must be > 0"),
    ("5=1 6=1 8=6 9=7 10=5", "param 10 constant_broadcast_type_C=5"),
    ("7=-3", "param 7 constantM=-3 is negative"),
    ("5=1 8=99999999 9=7", "param 8 (constantN) = 99999999 exceeds the limit"),
]


@pytest.mark.parametrize(("params", "message"), BAD_GEMM)
async def test_gemm_bad_params_refused(tmp_path: Path, params: str, message: str) -> None:

    text = f"7767517\n2 2\nInput in0 0 1 in0\nGemm gemm 1 1 in0 out0 {params}"
    model = write_model(tmp_path, text)
    async with Net() as net:
        with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
            await net.load_param(model.param)
    assert "m.param:4" in str(caught.value) and "gemm" in str(caught.value)


async def test_gemm_k_mismatch_is_an_error(device: VulkanDevice, tmp_path: Path) -> None:
    model, inputs = _gemm_model(tmp_path, GemmCase("", [(5, 7), (8, 6)]))
    with pytest.raises(Exception, match=r"disagree on K \(7 != 8\)"):
        await asyncvk_forward(model, inputs, ["out0"], gpu=True)


MATMUL_CASES = [
    ("", (7,), (7,)),
    ("", (5, 7), (7, 6)),
    ("0=1", (5, 7), (6, 7)),
    ("", (7,), (7, 6)),
    ("0=1", (7,), (6, 7)),
    ("", (5, 7), (7,)),
    ("0=1", (5, 7), (7,)),  # transB does not apply to a 1-D B
    ("", (7,), (3, 7, 6)),
    ("", (7,), (2, 3, 7, 6)),
    ("", (3, 5, 7), (7,)),
    ("", (2, 3, 5, 7), (7,)),
    ("", (3, 5, 7), (3, 7, 6)),
    ("0=1", (3, 5, 7), (1, 6, 7)),
    ("", (1, 5, 7), (3, 7, 6)),
    ("", (5, 7), (3, 7, 6)),
    ("0=1", (3, 5, 7), (6, 7)),
    ("", (2, 3, 5, 7), (2, 3, 7, 6)),
    ("0=1", (2, 1, 5, 7), (1, 3, 6, 7)),
    ("", (3, 5, 7), (2, 3, 7, 6)),
    ("", (2, 3, 5, 7), (7, 6)),
    ("", (2, 3, 37, 19), (2, 1, 19, 41)),
    ("0=1", (2, 3, 37, 20), (2, 1, 41, 20)),  # gemm_tiled.comp's vec4 path, batched
]


@pytest.mark.parametrize(
    ("params", "a", "b"),
    MATMUL_CASES,
    ids=[f"{p or 'default'}@{a}x{b}" for p, a, b in MATMUL_CASES],
)
async def test_matmul_matches_ncnn(
    device: VulkanDevice, tmp_path: Path, params: str, a: tuple[int, ...], b: tuple[int, ...]
) -> None:
    text = (
        f"7767517\n3 3\nInput in0 0 1 in0\nInput in1 0 1 in1\nMatMul mm 2 1 in0 in1 out0 {params}"
    )
    model = write_model(tmp_path, text)
    inputs = {"in0": RNG.standard_normal(a).astype(np.float32)}
    inputs["in1"] = RNG.standard_normal(b).astype(np.float32)
    await assert_gpu_and_cpu_match_ncnn(model, inputs, "MatMul")


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        ((5, 7), (8, 6), r"disagree on K \(7 != 8\)"),
        ((2, 5, 7), (3, 7, 6), "do not broadcast"),
    ],
)
async def test_matmul_bad_shapes_are_errors(
    device: VulkanDevice, tmp_path: Path, a: tuple[int, ...], b: tuple[int, ...], message: str
) -> None:
    text = "7767517\n3 3\nInput in0 0 1 in0\nInput in1 0 1 in1\nMatMul mm 2 1 in0 in1 out0"
    model = write_model(tmp_path, text)
    inputs = {"in0": np.zeros(a, np.float32), "in1": np.zeros(b, np.float32)}
    with pytest.raises(Exception, match=message):
        await asyncvk_forward(model, inputs, ["out0"], gpu=True)


async def test_matmul_bad_param_refused(tmp_path: Path) -> None:
    text = "7767517\n3 3\nInput in0 0 1 in0\nInput in1 0 1 in1\nMatMul mm 2 1 in0 in1 out0 0=2"
    model = write_model(tmp_path, text)
    async with Net() as net:
        with pytest.raises(ModelFormatError, match=r"m\.param:5, layer 'mm'.*param 0 transB=2"):
            await net.load_param(model.param)
