"""The pnnx model set (``tests/pnnx_models/``, built by ``tools/pnnx_model_set.py``): small
PyTorch models with random weights, converted by the real pnnx, against PyTorch's own output.

Each folder holds ``model.param`` / ``model.bin`` (fp32 weights), its inputs as ncnn blobs
(``input.npy``...; token ids as int32 values), PyTorch's outputs (``expected.npy``...) and
``meta.json`` naming the blobs. asyncvk's GPU path and its CPU path must both agree with PyTorch
within 1e-3 relative L2 error, and on the GPU path no layer may fall back to the CPU unless its
type only runs there; the ``ncnn`` wheel must still agree too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import Model, asyncvk_forward, ncnn_forward

from asyncvk.layers._catalog import layer_catalog

MODELS = Path(__file__).parent / "pnnx_models"
RTOL = 1e-3

#: (model, test) -> why asyncvk does not pass it yet; test: "gpu" (the GPU path's output),
#: "gpu_only" (no layer fell back to the CPU on the GPU path) or "cpu" (the CPU path). Strict
#: xfails: a fix shows up as XPASS and its entry must go.
XFAIL: dict[tuple[str, str], str] = {}

NAMES = sorted(d.name for d in MODELS.iterdir() if (d / "meta.json").is_file())
CPU_ONLY = {info.type for info in layer_catalog() if info.runs_on == "CPU"}


def _cases(path: str) -> list[Any]:
    return [
        pytest.param(
            name,
            marks=[pytest.mark.xfail(strict=True, reason=XFAIL[name, path])]
            if (name, path) in XFAIL
            else [],
            id=name,
        )
        for name in NAMES
    ]


def _load(name: str) -> tuple[Model, dict[str, Any], dict[str, np.ndarray], list[np.ndarray]]:
    folder = MODELS / name
    meta = json.loads((folder / "meta.json").read_text())
    inputs = {i["blob"]: np.load(folder / i["file"]) for i in meta["inputs"]}
    expected = [np.load(folder / o["file"]) for o in meta["outputs"]]
    return Model(folder / "model.param", folder / "model.bin"), meta, inputs, expected


def _assert_close(ours: np.ndarray, ref: np.ndarray, what: str) -> None:
    assert ours.shape == ref.shape, f"{what}: shape {ours.shape}, torch {ref.shape}"
    assert np.isfinite(ours).all(), f"{what}: non-finite values"
    diff = float(np.linalg.norm(ours.astype(np.float64) - ref.astype(np.float64)))
    scale = float(np.linalg.norm(ref.astype(np.float64)))
    assert diff <= RTOL * scale, f"{what}: rel L2 {diff / scale:.2e}"


def test_the_set_is_there() -> None:
    assert len(NAMES) >= 12, NAMES
    for name in NAMES:
        _, meta, inputs, expected = _load(name)
        assert meta["name"] == name
        assert len(inputs) == len(meta["inputs"]) and len(expected) == len(meta["outputs"])


@needs_vulkan
@pytest.mark.parametrize("name", _cases("gpu"))
async def test_gpu_matches_torch(name: str) -> None:
    model, meta, inputs, expected = _load(name)
    blobs = [o["blob"] for o in meta["outputs"]]
    ours, _ = await asyncvk_forward(model, inputs, blobs, gpu=True)
    for blob, ref in zip(blobs, expected, strict=True):
        _assert_close(ours[blob], ref, f"{name} gpu {blob}")


@needs_vulkan
@pytest.mark.parametrize("name", _cases("gpu_only"))
async def test_gpu_path_keeps_every_layer_on_the_gpu(name: str) -> None:
    """Only the layer types that exist on the CPU alone (Input, MemoryData...) run there."""
    model, meta, inputs, _ = _load(name)
    blobs = [o["blob"] for o in meta["outputs"]]
    _, cpu_types = await asyncvk_forward(model, inputs, blobs, gpu=True)
    fell_back = cpu_types - CPU_ONLY
    assert not fell_back, f"{name}: {sorted(fell_back)} ran on the CPU on the GPU path"


@pytest.mark.parametrize("name", _cases("cpu"))
async def test_cpu_path_matches_torch(name: str) -> None:
    model, meta, inputs, expected = _load(name)
    blobs = [o["blob"] for o in meta["outputs"]]
    ours, _ = await asyncvk_forward(model, inputs, blobs, gpu=False)
    for blob, ref in zip(blobs, expected, strict=True):
        _assert_close(ours[blob], ref, f"{name} cpu {blob}")


@pytest.mark.parametrize("name", NAMES)
def test_ncnn_wheel_matches_torch(name: str) -> None:
    pytest.importorskip("ncnn")
    model, meta, inputs, expected = _load(name)
    blobs = [o["blob"] for o in meta["outputs"]]
    # ncnn's Embed reads its input's int32 bits as the ids: pass them unchanged as float32
    feeds = {k: v.view(np.float32) if v.dtype == np.int32 else v for k, v in inputs.items()}
    theirs = ncnn_forward(model, feeds, blobs)
    for blob, ref in zip(blobs, expected, strict=True):
        _assert_close(theirs[blob], ref, f"{name} ncnn {blob}")
