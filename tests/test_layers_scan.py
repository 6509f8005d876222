"""CumulativeSum against ncnn itself (the wheel's CPU fp32), on the GPU path on lavapipe and the
CPU path over every dims and axis; ArgMax (a host step, left out of ncnn's builds) against its
source's rule over topk and out_max_val; bad params are a ModelFormatError naming the param."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import assert_close, asyncvk_forward, ncnn_forward, write_model

from asyncvk import Net
from asyncvk._errors import ModelFormatError

pytest.importorskip("ncnn")


def _model(tmp_path: Path, layer: str, keep: bool = True) -> object:
    """Input -> ``layer`` -> (times 1 on the GPU, so a layer sent to the CPU shows) -> out."""
    tail = "BinaryOp keep 1 1 mid out 0=2 1=1 2=1" if keep else ""
    count = 3 if keep else 2
    last = "mid" if keep else "out"
    text = f"7767517\n{count} {count}\nInput in0 0 1 in0\n{layer.format(out=last)}\n{tail}"
    return write_model(tmp_path, text)


CUMSUMS = [
    ((17,), 0),
    ((17,), 3),  # a 1-D blob ignores the axis, as ncnn does
    ((5, 9), 0),
    ((5, 9), 1),
    ((5, 9), -1),
    ((3, 5, 7), 0),
    ((3, 5, 7), 1),
    ((3, 5, 7), 2),
    ((3, 5, 7), -2),
    ((2, 3, 4, 5), 0),
    ((2, 3, 4, 5), 1),
    ((2, 3, 4, 5), 2),
    ((2, 3, 4, 5), 3),
]


@needs_vulkan
@pytest.mark.parametrize(("shape", "axis"), CUMSUMS, ids=[f"{s}@{a}" for s, a in CUMSUMS])
async def test_cumulative_sum_matches_ncnn(
    tmp_path: Path, shape: tuple[int, ...], axis: int
) -> None:
    m = _model(tmp_path, f"CumulativeSum cs0 1 1 in0 {{out}} 0={axis}")
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    theirs = ncnn_forward(m, {"in0": x}, ["out"])["out"]
    for gpu in (True, False):
        ours, cpu_types = await asyncvk_forward(m, {"in0": x}, ["out"], gpu=gpu)
        assert "CumulativeSum" not in cpu_types
        assert_close(ours["out"], theirs, "gpu" if gpu else "cpu", rtol=1e-5)


ARGMAXES = [
    ((37,), 1, 0),
    ((37,), 4, 0),
    ((37,), 3, 1),
    ((6, 8), 5, 1),
    ((3, 4, 7), 2, 0),
]


@needs_vulkan
@pytest.mark.parametrize(("shape", "topk", "values"), ARGMAXES)
async def test_argmax_sorts_as_ncnns_source(
    tmp_path: Path, shape: tuple[int, ...], topk: int, values: int
) -> None:
    """ncnn builds leave ArgMax out (the wheel has none): checked against its source's rule,
    a descending sort of (value, index) pairs, so a tie puts the larger index first."""
    m = _model(tmp_path, f"ArgMax am0 1 1 in0 {{out}} 0={values} 1={topk}", keep=False)
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    x.reshape(-1)[[3, 11]] = 9.0
    pairs = sorted(((float(v), i) for i, v in enumerate(x.reshape(-1))), reverse=True)[:topk]
    index = np.array([i for _, i in pairs], np.float32)
    top = np.array([v for v, _ in pairs], np.float32)
    expected = np.stack([top, index]) if values else index
    assert index[0] == 11  # the tie
    for gpu in (True, False):
        ours, _ = await asyncvk_forward(m, {"in0": x}, ["out"], gpu=gpu)
        np.testing.assert_array_equal(ours["out"], expected)


@pytest.mark.parametrize(
    ("layer", "says"),
    [
        ("ArgMax am0 1 1 in0 out 1=0", "param 1 topk = 0 must be at least 1"),
    ],
)
async def test_bad_params_are_refused_naming_the_param(
    tmp_path: Path, layer: str, says: str
) -> None:
    m = _model(tmp_path, layer.replace(" out ", " {out} "), keep=False)
    with pytest.raises(ModelFormatError, match=says):
        async with Net() as net:
            await net.load_param(m.param)  # type: ignore[attr-defined]


async def test_an_axis_the_blob_lacks_is_refused_when_planned(tmp_path: Path) -> None:
    m = _model(tmp_path, "CumulativeSum cs0 1 1 in0 {out} 0=3")
    with pytest.raises(Exception, match="param 0 axis 3 out of range"):
        await asyncvk_forward(m, {"in0": np.zeros((3, 4, 5), np.float32)}, ["out"], gpu=False)
