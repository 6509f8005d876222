"""RotaryEmbed against ncnn itself (the wheel's CPU fp32): the GPU path on lavapipe and the CPU
path, interleaved or rotate-half, 1-D to 3-D x with odd head and sequence counts, caches of
exactly the rows and columns x needs and larger ones; bad params are a ModelFormatError naming
the param, shapes ncnn would not fill an InputError.

ncnn's x86 build fuses the products with the sums (fmaddsub) where asyncvk rounds each product:
values are compared in float32 steps counted at 1, the size of the products."""

from __future__ import annotations

import re
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import assert_close_to_ncnn, asyncvk_forward, ncnn_forward, write_model

from asyncvk import InputError
from asyncvk._errors import ModelFormatError

pytest.importorskip("ncnn")
pytestmark = needs_vulkan


def model_text(params: str) -> str:
    return (
        "7767517\n4 4\nInput in0 0 1 x\nInput in1 0 1 cos\nInput in2 0 1 sin\n"
        f"RotaryEmbed op0 3 1 x cos sin out {params}\n"
    )


def inputs_for(
    x_shape: tuple[int, ...], cache_shape: tuple[int, ...] | None = None
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(zlib.crc32(repr((x_shape, cache_shape)).encode()))
    seqlen = x_shape[-2] if len(x_shape) >= 2 else 1
    if cache_shape is None:
        cache_shape = (seqlen, x_shape[-1] // 2)
    angles = rng.uniform(-np.pi, np.pi, cache_shape)
    return {
        "x": rng.uniform(-1, 1, x_shape).astype(np.float32),
        "cos": np.cos(angles).astype(np.float32),
        "sin": np.sin(angles).astype(np.float32),
    }


async def check(tmp_path: Path, params: str, inputs: dict[str, np.ndarray], gpu: bool) -> None:
    model = write_model(tmp_path, model_text(params))
    theirs = ncnn_forward(model, inputs, ["out"])["out"]
    ours, cpu_types = await asyncvk_forward(model, inputs, ["out"], gpu=gpu)
    assert "RotaryEmbed" not in cpu_types, "fell back to the CPU"
    assert_close_to_ncnn(ours["out"], theirs, ulps=2, scale=1.0)


#: ncnn's own test shapes (heads, seqlen, embed_dim), and fewer dims
SHAPES = [
    (8, 66, 32),
    (8, 64, 26),
    (12, 28, 64),
    (12, 22, 48),
    (15, 17, 28),
    (3, 5, 2),
    (1, 7, 18),
    (9, 40),
    (1, 6),
    (34,),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize("interleaved", [0, 1], ids=["halves", "interleaved"])
@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
async def test_matches_ncnn(
    tmp_path: Path, shape: tuple[int, ...], interleaved: int, gpu: bool
) -> None:
    await check(tmp_path, f"0={interleaved}", inputs_for(shape), gpu)


#: x, then a cache larger than x needs: more rows (positions), wider rows, a 1-D one
LARGER_CACHES = [
    ((4, 10, 16), (25, 8)),
    ((4, 10, 16), (10, 13)),
    ((3, 6, 12), (9, 11)),
    ((2, 1, 20), (10,)),
    ((20,), (10,)),
    ((5, 14), (20, 7)),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize("interleaved", [0, 1], ids=["halves", "interleaved"])
@pytest.mark.parametrize(
    ("shape", "cache"), LARGER_CACHES, ids=[f"{x}-{c}" for x, c in LARGER_CACHES]
)
async def test_a_larger_cache_is_read_as_ncnn_reads_it(
    tmp_path: Path, shape: tuple[int, ...], cache: tuple[int, ...], interleaved: int, gpu: bool
) -> None:
    """Row i for position i, its first embed_dim / 2 values."""
    await check(tmp_path, f"0={interleaved}", inputs_for(shape, cache), gpu)


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
async def test_the_math_is_a_rotation(tmp_path: Path, gpu: bool) -> None:
    """Independent of ncnn: a quarter turn maps (x0, x1) to (-x1, x0)."""
    x = np.arange(1, 13, dtype=np.float32).reshape(1, 2, 6)
    cos = np.zeros((2, 3), np.float32)
    sin = np.ones((2, 3), np.float32)
    model = write_model(tmp_path, model_text("0=1"))
    ours, _ = await asyncvk_forward(model, {"x": x, "cos": cos, "sin": sin}, ["out"], gpu=gpu)
    want = np.stack([-x[..., 1::2], x[..., 0::2]], axis=-1).reshape(x.shape)
    np.testing.assert_array_equal(ours["out"], want)
    model = write_model(tmp_path, model_text("0=0"))
    ours, _ = await asyncvk_forward(model, {"x": x, "cos": cos, "sin": sin}, ["out"], gpu=gpu)
    want = np.concatenate([-x[..., 3:], x[..., :3]], axis=-1)
    np.testing.assert_array_equal(ours["out"], want)


BAD_PARAMS = [
    ("0=2", "RotaryEmbed param 0 interleaved=2 must be 0 or 1"),
    ("0=-1", "RotaryEmbed param 0 interleaved=-1 must be 0 or 1"),
]


@pytest.mark.parametrize(("params", "message"), BAD_PARAMS, ids=[b[0] for b in BAD_PARAMS])
async def test_bad_params_name_file_line_layer_and_param(
    tmp_path: Path, params: str, message: str
) -> None:
    model = write_model(tmp_path, model_text(params))
    with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
        await asyncvk_forward(model, inputs_for((2, 3, 4)), ["out"])
    assert (caught.value.file, caught.value.line, caught.value.layer) == (
        str(model.param),
        6,
        "op0",
    )


async def test_it_takes_three_blobs(tmp_path: Path) -> None:
    text = model_text("").replace("op0 3 1 x cos sin out", "op0 2 1 x cos out")
    model = write_model(tmp_path, text)
    with pytest.raises(ModelFormatError, match="RotaryEmbed takes 3 input blobs, got 2"):
        await asyncvk_forward(model, inputs_for((2, 3, 4)), ["out"])


BAD_SHAPES = [
    ((2, 3, 5), None, "RotaryEmbed: x (2, 3, 5) has an odd embed_dim 5"),
    ((2, 2, 3, 4), (3, 2), "RotaryEmbed: x (2, 2, 3, 4) has 4 dims; it takes 1 to 3"),
    (
        (2, 6, 8),
        (5, 4),
        "RotaryEmbed: the cos cache (5, 4) is smaller than x (2, 6, 8) needs: (6, 4)",
    ),
    (
        (2, 6, 8),
        (6, 3),
        "RotaryEmbed: the cos cache (6, 3) is smaller than x (2, 6, 8) needs: (6, 4)",
    ),
    ((2, 6, 8), (1, 6, 4), "RotaryEmbed: the cos cache (1, 6, 4) must be 1-D or 2-D"),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize(
    ("shape", "cache", "message"), BAD_SHAPES, ids=[b[2][13:40] for b in BAD_SHAPES]
)
async def test_shapes_ncnn_would_not_fill_are_an_input_error(
    tmp_path: Path,
    shape: tuple[int, ...],
    cache: tuple[int, ...] | None,
    message: str,
    gpu: bool,
) -> None:
    """ncnn leaves output values unwritten or reads past a cache there."""
    model = write_model(tmp_path, model_text(""))
    inputs = {
        "x": np.ones(shape, np.float32),
        "cos": np.ones(cache or (shape[-2], 2), np.float32),
        "sin": np.ones(cache or (shape[-2], 2), np.float32),
    }
    with pytest.raises(InputError, match=re.escape(message)):
        await asyncvk_forward(model, inputs, ["out"], gpu=gpu)
