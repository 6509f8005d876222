"""LRN, LayerNorm, GroupNorm, InstanceNorm and RMSNorm against ncnn itself (the wheel's CPU
fp32): the GPU path on lavapipe and the CPU path, over the params and dims each type takes;
bad params are a ModelFormatError naming the file, line, layer and param."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import Model, assert_close, asyncvk_forward, ncnn_forward, raw, write_model

from asyncvk import InputError
from asyncvk._errors import ModelFormatError
from asyncvk.layers import norms

pytest.importorskip("ncnn")
pytestmark = needs_vulkan


@dataclass(frozen=True)
class Case:
    """One layer line (``type params``) and the weights it reads, run on an input shape."""

    id: str
    layer: str
    shape: tuple[int, ...]
    weights: tuple[int, ...] = ()  # the length of each raw fp32 weight, in file order

    def model_text(self) -> str:
        kind, _, params = self.layer.partition(" ")
        # times 1 on the GPU after it: a norm layer sent to the CPU then shows in the plan
        return (
            f"7767517\n3 3\nInput in0 0 1 in0\n{kind} norm0 1 1 in0 out0 {params}\n"
            "BinaryOp keep 1 1 out0 out1 0=2 1=1 2=1\n"
        )


def _weights(case: Case, rng: np.random.Generator) -> list[bytes]:
    # gamma around 1, beta around 0, so a swapped or dropped weight shows
    return [
        raw(rng.uniform(0.5, 1.5, n) if i == 0 else rng.normal(0, 0.5, n))
        for i, n in enumerate(case.weights)
    ]


CASES = [
    # LRN: alexnet's and googlenet's across channels, odd and even windows, within channel
    Case("lrn-across-alexnet", "LRN 2=0.0001", (16, 9, 7)),
    Case("lrn-across-big-alpha", "LRN 0=0 1=3 2=2.5 3=0.6 4=2", (7, 5, 6)),
    Case("lrn-across-even", "LRN 0=0 1=4 2=1.5 3=0.9", (9, 4, 5)),
    Case("lrn-across-wider-than-c", "LRN 1=7 2=3", (3, 5, 4)),
    Case("lrn-within", "LRN 0=1 1=3 2=2 3=0.75", (4, 7, 9)),
    Case("lrn-within-even", "LRN 0=1 1=4 2=5 3=0.5 4=1.5", (3, 6, 5)),
    Case("lrn-within-2d", "LRN 0=1 1=5 2=4", (6, 11)),
    Case("lrn-across-1d", "LRN 1=3 2=4", (13,)),
    # LayerNorm: per row (dims 2, dims 3 with affine_size w), per channel, no affine
    Case("layernorm-vit", "LayerNorm 0=24 1=1e-6 2=1", (5, 24), (24, 24)),
    Case("layernorm-1d", "LayerNorm 0=37 1=0.01", (37,), (37, 37)),
    Case("layernorm-3d-rows", "LayerNorm 0=7 1=1e-5", (3, 4, 7), (7, 7)),
    Case("layernorm-3d-channel", "LayerNorm 0=28 1=1e-5", (3, 4, 7), (28, 28)),
    Case("layernorm-4d-plane", "LayerNorm 0=20 1=1e-5", (2, 3, 4, 5), (20, 20)),
    Case("layernorm-4d-channel", "LayerNorm 0=60 1=1e-5", (2, 3, 4, 5), (60, 60)),
    Case("layernorm-no-affine", "LayerNorm 0=0 1=0.5 2=0", (3, 4, 7)),
    Case("layernorm-long-rows", "LayerNorm 0=300", (3, 300), (300, 300)),
    # RMSNorm
    Case("rmsnorm-2d", "RMSNorm 0=16 1=1e-6", (6, 16), (16,)),
    Case("rmsnorm-3d-channel", "RMSNorm 0=35 1=0.1", (2, 5, 7), (35,)),
    Case("rmsnorm-4d-rows-no-affine", "RMSNorm 0=5 1=1e-5 2=0", (2, 3, 4, 5)),
    # InstanceNorm: per channel, dims 1/2 one instance, more gammas than channels
    Case("instancenorm-3d", "InstanceNorm 0=5 1=1e-5", (5, 6, 7), (5, 5)),
    Case("instancenorm-4d-no-affine", "InstanceNorm 0=0 1=0.01 2=0", (3, 2, 4, 5)),
    Case("instancenorm-2d", "InstanceNorm 0=1 1=1e-3", (9, 13), (1, 1)),
    Case("instancenorm-extra-gamma", "InstanceNorm 0=8 1=1e-3", (3, 4, 4), (8, 8)),
    # GroupNorm: groups of channels of every dims
    Case("groupnorm-3d", "GroupNorm 0=3 1=12 2=1e-5", (12, 5, 6), (12, 12)),
    Case("groupnorm-4d", "GroupNorm 0=2 1=4 2=1e-5", (4, 3, 2, 5), (4, 4)),
    Case("groupnorm-2d", "GroupNorm 0=4 1=8 2=0.01", (8, 9), (8, 8)),
    Case("groupnorm-1d-no-affine", "GroupNorm 0=5 1=20 2=0.001 3=0", (20,)),
    Case("groupnorm-one-group", "GroupNorm 0=1 1=6 2=1e-5", (6, 7, 3), (6, 6)),
]


def _run_case(tmp_path: Path, case: Case) -> tuple[Model, dict[str, np.ndarray]]:
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    model = write_model(tmp_path, case.model_text(), _weights(case, rng))
    x = (rng.normal(1.0, 2.0, case.shape)).astype(np.float32)
    return model, {"in0": x}


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_matches_ncnn(tmp_path: Path, case: Case, gpu: bool) -> None:
    model, inputs = _run_case(tmp_path, case)
    theirs = ncnn_forward(model, inputs, ["out1"])["out1"]
    ours, cpu_types = await asyncvk_forward(model, inputs, ["out1"], gpu=gpu)
    assert_close(ours["out1"], theirs, case.id)
    assert cpu_types == set(), f"fell back to the CPU: {cpu_types}"


async def test_a_workgroup_normalizes_several_rows_when_there_are_more_rows_than_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past 65535 rows a workgroup takes rows r, r + groups, ...: the same with 3 groups."""
    monkeypatch.setattr(norms, "_MAX_ROW_GROUPS", 3)
    case = Case("layernorm-more-rows-than-groups", "LayerNorm 0=6 1=1e-5", (4, 5, 6), (6, 6))
    model, inputs = _run_case(tmp_path, case)
    theirs = ncnn_forward(model, inputs, ["out1"])["out1"]
    ours, cpu_types = await asyncvk_forward(model, inputs, ["out1"])
    assert_close(ours["out1"], theirs, case.id)
    assert cpu_types == set()


BAD_PARAMS = [
    ("LRN 0=2", "LRN param 0 (region_type) = 2"),
    ("LRN 1=0", "LRN param 1 (local_size) = 0 must be >= 1"),
    ("LRN 1=100000", "LRN param 1 (local_size) = 100000 exceeds the limit"),
    ("LayerNorm 0=-3", "LayerNorm param 0 (affine_size) = -3 must be >= 0"),
    ("LayerNorm 0=0 2=1", "LayerNorm param 2 (affine) = 1 needs param 0 (affine_size) > 0"),
    ("RMSNorm 0=0", "RMSNorm param 2 (affine) = 1 needs param 0 (affine_size) > 0"),
    ("InstanceNorm 0=0", "InstanceNorm param 2 (affine) = 1 needs param 0 (channels) > 0"),
    ("GroupNorm 0=0 1=4", "GroupNorm param 0 (group) = 0 must be >= 1"),
    ("GroupNorm 0=3 1=4", "GroupNorm param 1 (channels) = 4 is not a multiple of param 0"),
    ("GroupNorm 0=1 1=-4 3=0", "GroupNorm param 1 (channels) = -4 must be >= 0"),
]


@pytest.mark.parametrize(("layer", "message"), BAD_PARAMS, ids=[b[0] for b in BAD_PARAMS])
async def test_bad_params_name_file_line_layer_and_param(
    tmp_path: Path, layer: str, message: str
) -> None:
    case = Case("bad", layer, (4, 4, 4))
    model = write_model(tmp_path, case.model_text(), [raw(np.ones(64, np.float32))])
    with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
        await asyncvk_forward(model, {"in0": np.ones(case.shape, np.float32)}, ["out0"])
    assert (caught.value.file, caught.value.line, caught.value.layer) == (
        str(model.param),
        4,
        "norm0",
    )


BAD_SHAPES = [
    ("LRN", (), (2, 3, 4, 5), "LRN takes blobs of 1 to 3 dims, got shape (2, 3, 4, 5)"),
    (
        "LayerNorm 0=8",
        (8, 8),
        (3, 9),
        "LayerNorm has 8 weights (param 0 affine_size) but a blob of shape (3, 9) needs 9",
    ),
    (
        "InstanceNorm 0=2",
        (2, 2),
        (3, 4, 4),
        "InstanceNorm has 2 channels (param 0) but a blob of shape (3, 4, 4) needs 3",
    ),
    (
        "GroupNorm 0=2 1=4",
        (4, 4),
        (6, 2, 2),
        "GroupNorm param 1 (channels) = 4 but the blob of shape (6, 2, 2) has 6 channels on axis 0",
    ),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize(
    ("layer", "weights", "shape", "message"), BAD_SHAPES, ids=[b[0] for b in BAD_SHAPES]
)
async def test_a_blob_the_layer_cannot_take_is_a_plan_error(
    tmp_path: Path,
    layer: str,
    weights: tuple[int, ...],
    shape: tuple[int, ...],
    message: str,
    gpu: bool,
) -> None:
    """ncnn would read weights past their end (or skip a depth slice): asyncvk names why."""
    case = Case("bad-shape", layer, shape, weights)
    model = write_model(tmp_path, case.model_text(), _weights(case, np.random.default_rng(0)))
    with pytest.raises(InputError, match=re.escape(message)):
        await asyncvk_forward(model, {"in0": np.ones(shape, np.float32)}, ["out0"], gpu=gpu)
