"""``--random-weights``: a ``.bin`` for a ``.param`` alone, in exactly the layout ncnn reads,
the same bytes for the same seed, and values that keep a network's activations finite."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from ncnn_oracle import Model, assert_close, asyncvk_forward, ncnn_forward
from ncnn_suite import ncnn_read_sizes, suite_params

from asyncvk.net._random_weights import fill_weights, random_weights


@pytest.mark.parametrize("param", suite_params(), ids=lambda p: p.stem)
def test_every_read_is_one_ncnn_makes(param: Path) -> None:
    """ncnn loading the same ``.param`` asks for these bytes, in this order and these sizes."""
    assert fill_weights(param).read_sizes == ncnn_read_sizes(param)


def test_the_same_seed_gives_the_same_bytes() -> None:
    param = Path(__file__).parent / "ncnn_benchmark" / "mobilenet_v2.param"
    first = random_weights(param, seed=1)
    assert random_weights(param, seed=1) == first
    assert random_weights(param, seed=2) != first
    assert len(random_weights(param, seed=2)) == len(first)


@pytest.mark.parametrize("stem", ["squeezenet", "mobilenet_v2", "resnet18"])
async def test_ncnn_and_asyncvk_agree_on_random_weights(tmp_path: Path, stem: str) -> None:
    param = Path(__file__).parent / "ncnn_benchmark" / f"{stem}.param"
    weights = tmp_path / f"{stem}.bin"
    weights.write_bytes(random_weights(param))
    model = Model(param, weights)
    x = np.random.default_rng(0).uniform(-1, 1, (3, 224, 224)).astype(np.float32)
    theirs = ncnn_forward(model, {"data": x}, ["output"])["output"]
    ours, _ = await asyncvk_forward(model, {"data": x}, ["output"])
    assert np.isfinite(theirs).all() and float(theirs.std()) > 0  # a softmax that tells apart
    assert_close(ours["output"], theirs, stem, rtol=1e-3)
