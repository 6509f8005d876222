"""MultiHeadAttention against ncnn itself: the same .param/.bin through the ncnn wheel's CPU
fp32 and through asyncvk's GPU path (which must not fall back to the CPU) and its CPU path."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from ncnn_oracle import (
    Model,
    assert_gpu_and_cpu_match_ncnn,
    asyncvk_forward,
    raw,
    tagged,
    write_model,
)

from asyncvk import Net, Option
from asyncvk._errors import ModelFormatError
from asyncvk.gpu import VulkanDevice
from asyncvk.gpu._shader_choices import ShaderChoices

RNG = np.random.default_rng(15)


@dataclass(frozen=True)
class MhaCase:
    """One MultiHeadAttention layer: embed_dim, heads, the q/k/v widths, sequence lengths, how
    many of q, k, v are separate blobs, the mask's shape (None: none) and extra params."""

    embed: int
    heads: int
    src: int
    dst: int
    blobs: int = 1
    qdim: int = 0
    kdim: int = 0
    vdim: int = 0
    mask: tuple[int, ...] | None = None
    extra: str = ""

    @property
    def id(self) -> str:
        mask = "x".join(map(str, self.mask)) if self.mask else "none"
        widths = f"{self.qdim or self.embed},{self.kdim or self.embed},{self.vdim or self.embed}"
        return (
            f"e{self.embed}h{self.heads}-{self.src}x{self.dst}-{self.blobs}in-{widths}"
            f"-mask{mask}{'-' + self.extra.replace(' ', ',') if self.extra else ''}"
        )


MHA_CASES = [
    MhaCase(8, 2, 5, 5),
    MhaCase(8, 2, 5, 5, extra="6=0.3"),
    MhaCase(6, 1, 4, 4, blobs=3),
    MhaCase(8, 4, 5, 7, blobs=2, qdim=6, kdim=5, vdim=5),
    MhaCase(8, 2, 5, 7, blobs=3, qdim=6, kdim=3, vdim=9),
    MhaCase(8, 2, 5, 5, mask=(5, 5)),
    MhaCase(8, 2, 5, 7, blobs=2, kdim=4, vdim=4, mask=(2, 5, 7)),
    MhaCase(8, 2, 5, 7, blobs=3, kdim=4, vdim=6, mask=(5, 7)),
    MhaCase(12, 3, 6, 6, blobs=3, mask=(3, 6, 6), extra="6=1.5"),
    # past one 32x32 gemm block in every product
    MhaCase(48, 3, 37, 41, blobs=2),
]


def _mha_model(tmp_path: Path, case: MhaCase) -> tuple[Model, dict[str, np.ndarray]]:
    e = case.embed
    qdim, kdim, vdim = case.qdim or e, case.kdim or e, case.vdim or e
    shapes: list[tuple[int, ...]] = [(case.src, qdim), (case.dst, kdim), (case.dst, vdim)]
    shapes = shapes[: case.blobs]
    if case.mask is not None:
        shapes.append(case.mask)
    names = [f"in{i}" for i in range(len(shapes))]
    params = f"0={e} 1={case.heads} 2={e * qdim} 3={kdim} 4={vdim}"
    params += f" 5={int(case.mask is not None)} {case.extra}"
    lines = [f"Input {n} 0 1 {n}" for n in names]
    lines.append(f"MultiHeadAttention mha {len(names)} 1 {' '.join(names)} out0 {params}")
    text = f"7767517\n{len(lines)} {len(names) + 1}\n" + "\n".join(lines)

    def w(*shape: int) -> np.ndarray:
        return (RNG.standard_normal(shape) * 0.5).astype(np.float32)

    weights = [tagged(w(e, qdim)), raw(w(e)), tagged(w(e, kdim)), raw(w(e))]
    weights += [tagged(w(e, vdim)), raw(w(e)), tagged(w(qdim, e)), raw(w(qdim))]
    model = write_model(tmp_path, text, weights)
    inputs = {
        n: RNG.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes, strict=True)
    }
    if case.mask is not None:  # an additive mask with -inf-like holes, as models make them
        mask = RNG.standard_normal(case.mask).astype(np.float32)
        mask[RNG.random(case.mask) < 0.2] = -1e9
        inputs[names[-1]] = mask
    return model, inputs


def _product_shader(shader: str) -> ShaderChoices:
    """gemm_tiled.comp (CPU devices) or gemm.comp (GPUs, whose attention products add the mask
    after alpha, c_last, and split k over its z invocations)."""
    return ShaderChoices(gemm_tiled="always" if shader == "tiled" else "never")


#: every case on the tiled shader; on gemm.comp the masked ones and the one past its blocks
MHA_RUNS = [(c, "tiled") for c in MHA_CASES] + [
    (c, "plain") for c in MHA_CASES if c.mask is not None or c.embed > 32
]


@pytest.mark.parametrize(("case", "shader"), MHA_RUNS, ids=[f"{c.id}-{s}" for c, s in MHA_RUNS])
async def test_multiheadattention_matches_ncnn(
    device: VulkanDevice,
    tmp_path: Path,
    case: MhaCase,
    shader: str,
) -> None:
    model, inputs = _mha_model(tmp_path, case)
    choices = _product_shader(shader)
    await assert_gpu_and_cpu_match_ncnn(model, inputs, "MultiHeadAttention", choices=choices)


async def test_the_tiled_products_share_one_pipeline(device: VulkanDevice, tmp_path: Path) -> None:
    """With and without C, C before or after alpha: one gemm_tiled.comp pipeline (llvmpipe
    compiles each pipeline at its first dispatch)."""
    model, inputs = _mha_model(tmp_path, MhaCase(8, 2, 5, 5, mask=(5, 5)))
    async with Net(Option(shader_choices=_product_shader("tiled"))) as net:
        await net.load_param(model.param)
        await net.load_model(model.bin)
        ex = net.create_extractor()
        for name, value in inputs.items():
            ex.input(name, value)
        await ex.extract("out0")
        gemm = [b.name for b in net.cache.build_log() if "gemm" in b.name]
    assert len(gemm) == 1, gemm


BAD_MHA = [
    ("0=8 1=3 2=64", "param 0 embed_dim=8 must be a positive multiple of param 1 num_heads=3"),
    ("0=8 1=2 2=60", "param 2 weight_data_size=60 must be a positive multiple of embed_dim=8"),
    ("0=8 1=2 2=64 3=0", "params 3 kdim=0 and 4 vdim=8 must be > 0"),
    ("0=8 1=2 2=64 5=2", "param 5 attn_mask=2"),
    ("0=8 1=2 2=64 7=2", "param 7 kv_cache=2 not 0/1"),
    ("0=8 1=2 2=64 18=1", "param 18 quantize_term=1"),
    (
        "0=8 1=-1 2=64",
        "param 0 embed_dim=8 must be a positive multiple of param 1 num_heads=-1",
    ),
]


@pytest.mark.parametrize(("params", "message"), BAD_MHA)
async def test_multiheadattention_bad_params_refused(
    tmp_path: Path, params: str, message: str
) -> None:
    text = f"7767517\n2 2\nInput in0 0 1 in0\nMultiHeadAttention mha 1 1 in0 out0 {params}"
    model = write_model(tmp_path, text)
    async with Net() as net:
        with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
            await net.load_param(model.param)
    assert "m.param:4" in str(caught.value) and "mha" in str(caught.value)


@pytest.mark.parametrize(
    ("mask", "message"),
    [((5, 6), r"attn_mask must be \(5, 5\) or \(2, 5, 5\), got \(5, 6\)"), (None, "")],
)
async def test_multiheadattention_bad_shapes_are_errors(
    device: VulkanDevice, tmp_path: Path, mask: tuple[int, ...] | None, message: str
) -> None:
    model, inputs = _mha_model(tmp_path, MhaCase(8, 2, 5, 5, mask=(5, 5)))
    if mask is not None:
        inputs["in1"] = np.zeros(mask, np.float32)
    else:  # q of the wrong width
        inputs["in0"] = np.zeros((5, 7), np.float32)
        message = r"q must be \(seq, 8\), got shape \(5, 7\)"
    with pytest.raises(Exception, match=message):
        await asyncvk_forward(model, inputs, ["out0"], gpu=True)


SDPA_CASES = [
    # (params, q, k, v, mask)
    ("", (2, 5, 8), (2, 7, 8), (2, 7, 6), None),
    ("6=0.7", (3, 5, 8), (3, 5, 8), (3, 5, 8), None),
    ("", (4, 5, 8), (2, 7, 8), (2, 7, 3), None),  # grouped-query: 2 heads per k/v group
    ("", (5, 8), (7, 8), (7, 6), None),  # 2-D operands are one head
    ("5=1", (2, 5, 8), (2, 7, 8), (2, 7, 6), (5, 7)),
    ("5=1", (4, 5, 8), (2, 7, 8), (2, 7, 6), (1, 5, 7)),
    ("5=1 6=0.25", (4, 5, 8), (2, 7, 8), (2, 7, 6), (4, 5, 7)),
    ("", (2, 37, 16), (1, 41, 16), (1, 41, 35), None),
]


#: every case on the tiled shader; on gemm.comp the masked ones (its c_last add)
SDPA_RUNS = [(*c, "tiled") for c in SDPA_CASES] + [(*c, "plain") for c in SDPA_CASES if c[4]]


@pytest.mark.parametrize(
    ("params", "q", "k", "v", "mask", "shader"),
    SDPA_RUNS,
    ids=[f"{c[0] or 'default'}@{c[1]}{c[2]}{c[3]}-mask{c[4]}-{c[5]}" for c in SDPA_RUNS],
)
async def test_sdpa_matches_ncnn(
    device: VulkanDevice,
    tmp_path: Path,
    params: str,
    q: tuple[int, ...],
    k: tuple[int, ...],
    v: tuple[int, ...],
    mask: tuple[int, ...] | None,
    shader: str,
) -> None:
    shapes = [q, k, v] + ([mask] if mask else [])
    names = [f"in{i}" for i in range(len(shapes))]
    lines = [f"Input {n} 0 1 {n}" for n in names]
    lines.append(f"SDPA sdpa {len(names)} 1 {' '.join(names)} out0 {params}")
    text = f"7767517\n{len(lines)} {len(names) + 1}\n" + "\n".join(lines)
    model = write_model(tmp_path, text)
    inputs = {
        n: RNG.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes, strict=True)
    }
    if mask is not None:
        inputs["in3"][RNG.random(mask) < 0.2] = -1e9
    await assert_gpu_and_cpu_match_ncnn(model, inputs, "SDPA", choices=_product_shader(shader))


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ("7=2", "param 7 kv_cache=2 must be 0 or 1"),
        ("18=2", "param 18 int8_scale_term=2"),
        ("5=3", "param 5 attn_mask=3 must be 0 or 1"),
    ],
)
async def test_sdpa_bad_params_refused(tmp_path: Path, params: str, message: str) -> None:
    text = (
        "7767517\n4 4\nInput in0 0 1 in0\nInput in1 0 1 in1\nInput in2 0 1 in2\n"
        f"SDPA sdpa 3 1 in0 in1 in2 out0 {params}"
    )
    model = write_model(tmp_path, text)
    async with Net() as net:
        with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
            await net.load_param(model.param)
    assert "m.param:6" in str(caught.value) and "sdpa" in str(caught.value)


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ([(3, 5, 8), (2, 7, 8), (2, 7, 6)], "3 query heads do not split into 2 groups"),
        ([(2, 5, 8), (2, 7, 4), (2, 7, 6)], "do not fit q"),
        ([(2, 5, 8), (2, 7, 8), (2, 6, 6)], "do not fit q"),
    ],
)
async def test_sdpa_bad_shapes_are_errors(
    device: VulkanDevice, tmp_path: Path, shapes: list[tuple[int, ...]], message: str
) -> None:
    text = (
        "7767517\n4 4\nInput in0 0 1 in0\nInput in1 0 1 in1\nInput in2 0 1 in2\n"
        "SDPA sdpa 3 1 in0 in1 in2 out0"
    )
    model = write_model(tmp_path, text)
    inputs = {f"in{i}": np.zeros(s, np.float32) for i, s in enumerate(shapes)}
    with pytest.raises(Exception, match=message):
        await asyncvk_forward(model, inputs, ["out0"], gpu=True)
