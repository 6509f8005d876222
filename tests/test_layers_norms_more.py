"""Normalize and MVN against ncnn itself (the wheel's CPU fp32): the GPU path on lavapipe and
the CPU path, over every param that changes the math and blobs of 1 to 4 dims; bad params are
a ModelFormatError naming the file, line, layer and param."""

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
from asyncvk.layers import norms_more

pytest.importorskip("ncnn")
pytestmark = needs_vulkan


@dataclass(frozen=True)
class Case:
    """One layer line (``type params``), its scale count (Normalize), an input shape and the
    input's mean (an offset MVN must take away)."""

    id: str
    layer: str
    shape: tuple[int, ...]
    scales: int = 0
    mean: float = 0.0

    def model_text(self) -> str:
        kind, _, params = self.layer.partition(" ")
        # times 1 on the GPU after it: a layer sent to the CPU then shows in the plan
        return (
            f"7767517\n3 3\nInput in0 0 1 in0\n{kind} norm0 1 1 in0 out0 {params}\n"
            "BinaryOp keep 1 1 out0 out1 0=2 1=1 2=1\n"
        )


# Normalize: 0 across_spatial, 1 channel_shared, 2 eps, 3 scale_data_size, 4 across_channel,
# 9 eps_mode
NORMALIZE = [
    # pnnx's F.normalize(x, dim=0): across channels at each position, pytorch eps, one scale
    Case("normalize-pnnx", "Normalize 0=0 1=1 2=1e-12 3=1 4=1 9=1", (5, 7, 9), 1),
    Case("normalize-channel-caffe", "Normalize 0=0 1=0 2=1e-4 3=6 4=1", (6, 5, 7), 6),
    Case("normalize-channel-tf-shared-4d", "Normalize 1=1 2=1e-3 3=1 9=2", (3, 2, 4, 5), 1),
    Case("normalize-channel-pytorch-4d", "Normalize 2=1e-6 3=4 9=1", (4, 3, 2, 5), 4),
    Case("normalize-channel-2d", "Normalize 2=0.5 3=1", (6, 11), 1),  # one channel: x / |x|
    Case("normalize-channel-1d-tf", "Normalize 2=0.25 3=1 9=2", (13,), 1),
    # across each channel's spatial values
    Case("normalize-spatial-caffe", "Normalize 0=1 4=0 2=1e-4 3=4", (4, 9, 11), 4),
    Case("normalize-spatial-pytorch-shared-4d", "Normalize 0=1 4=0 1=1 3=1 9=1", (3, 2, 5, 7), 1),
    Case("normalize-spatial-tf", "Normalize 0=1 4=0 2=1e-2 3=5 9=2", (5, 3, 6), 5),
    Case("normalize-spatial-1d", "Normalize 0=1 4=0 3=1", (37,), 1),
    Case("normalize-spatial-2d", "Normalize 0=1 4=0 3=1 9=1", (7, 300), 1),
    # the whole blob
    Case("normalize-whole-caffe", "Normalize 0=1 4=1 3=5", (5, 6, 7), 5),
    Case("normalize-whole-tf-4d", "Normalize 0=1 4=1 3=2 9=2 2=1e-3", (2, 3, 4, 5), 2),
    Case("normalize-whole-shared-2d", "Normalize 0=1 4=1 1=1 3=1 9=1", (9, 13), 1),
    Case("normalize-whole-many-channels", "Normalize 0=1 4=1 3=300", (300, 2, 3), 300),
    # eps decides: max(sqrt(s), eps) and max(s, eps) take eps
    Case("normalize-spatial-eps-wins-pytorch", "Normalize 0=1 4=0 2=100 3=3 9=1", (3, 4, 5), 3),
    Case("normalize-channel-eps-wins-tf", "Normalize 2=1e3 3=3 9=2", (3, 4, 5), 3),
    # channel_shared reads scale[0] alone, however many there are
    Case("normalize-spatial-shared-of-4", "Normalize 0=1 4=0 1=1 3=4", (4, 5, 6), 4),
    Case("normalize-channel-shared-of-3", "Normalize 1=1 3=3 9=2", (3, 5, 6), 3),
    # more scales than channels; neither across: ncnn leaves the blob as it is
    Case("normalize-extra-scales", "Normalize 0=1 3=8", (3, 4, 4), 8),
    Case("normalize-neither", "Normalize 0=0 4=0 3=2", (3, 4, 5), 2),
]

# MVN: 0 normalize_variance, 1 across_channels, 2 eps
MVN = [
    Case("mvn-mean", "MVN", (4, 5, 6), mean=3.0),
    Case("mvn-variance", "MVN 0=1", (4, 5, 6), mean=2.0),
    Case("mvn-variance-4d", "MVN 0=1 2=1e-3", (3, 2, 4, 5), mean=-1.0),
    Case("mvn-across-mean", "MVN 1=1", (3, 5, 7), mean=1.5),
    Case("mvn-across-variance", "MVN 0=1 1=1", (5, 4, 3), mean=1.0),
    Case("mvn-across-variance-4d", "MVN 0=1 1=1", (2, 3, 4, 5), mean=4.0),
    Case("mvn-big-eps", "MVN 0=1 2=0.5", (3, 4, 5), mean=1.0),  # eps is added to the std
    Case("mvn-1d", "MVN 0=1", (37,), mean=2.0),
    Case("mvn-2d", "MVN 0=1 1=1", (6, 11), mean=-2.0),
    Case("mvn-2d-mean", "MVN", (3, 9), mean=5.0),
    Case("mvn-long-channels", "MVN 0=1", (2, 1000), mean=1.0),
    Case("mvn-many-channels", "MVN 0=1", (300, 2, 3), mean=1.0),
]


def _run_case(tmp_path: Path, case: Case) -> tuple[Model, dict[str, np.ndarray]]:
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    # scales around 1 but each its own, so a wrong or shared index shows
    weights = [raw(rng.uniform(0.5, 1.5, case.scales))] if case.scales else []
    model = write_model(tmp_path, case.model_text(), weights)
    x = rng.normal(case.mean, 2.0, case.shape).astype(np.float32)
    return model, {"in0": x}


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize("case", NORMALIZE + MVN, ids=[c.id for c in NORMALIZE + MVN])
async def test_matches_ncnn(tmp_path: Path, case: Case, gpu: bool) -> None:
    model, inputs = _run_case(tmp_path, case)
    theirs = ncnn_forward(model, inputs, ["out1"])["out1"]
    ours, cpu_types = await asyncvk_forward(model, inputs, ["out1"], gpu=gpu)
    assert_close(ours["out1"], theirs, case.id)
    assert cpu_types == set(), f"fell back to the CPU: {cpu_types}"


async def test_a_workgroup_sums_several_channels_when_there_are_more_than_groups(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past 65535 channels a workgroup takes channels q, q + groups, ...: the same with 2."""
    monkeypatch.setattr(norms_more, "_MAX_CHANNEL_GROUPS", 2)
    for case in (
        Case("normalize-looped", "Normalize 0=1 4=0 3=5", (5, 3, 4), 5),
        Case("mvn-looped", "MVN 0=1", (5, 3, 4), mean=1.0),
    ):
        model, inputs = _run_case(tmp_path, case)
        theirs = ncnn_forward(model, inputs, ["out1"])["out1"]
        ours, cpu_types = await asyncvk_forward(model, inputs, ["out1"])
        assert_close(ours["out1"], theirs, case.id)
        assert cpu_types == set()


async def test_a_zero_blob_gives_ncnns_infinities_and_nans(tmp_path: Path) -> None:
    """eps 0 over zeros: 0 * (1 / 0) is NaN in ncnn's C, so it is here, on both paths."""
    case = Case("normalize-zeros", "Normalize 0=1 4=0 1=1 2=0 3=1", (2, 3, 4), 1)
    model = write_model(tmp_path, case.model_text(), [raw(np.ones(1))])
    inputs = {"in0": np.zeros(case.shape, np.float32)}
    theirs = ncnn_forward(model, inputs, ["out1"])["out1"]
    assert np.isnan(theirs).all()
    for gpu in (True, False):
        ours, _ = await asyncvk_forward(model, inputs, ["out1"], gpu=gpu)
        assert np.isnan(ours["out1"]).all()


BAD_PARAMS = [
    ("Normalize 3=0", "Normalize param 3 (scale_data_size) = 0 must be >= 1"),
    ("Normalize 3=-2", "Normalize param 3 (scale_data_size) = -2 must be >= 1"),
    ("Normalize 3=2000000", "Normalize param 3 (scale_data_size) = 2000000 exceeds the limit"),
    ("Normalize 3=1 9=3", "Normalize param 9 (eps_mode) = 3: 0 (caffe), 1 (pytorch) or 2"),
    ("Normalize 3=1 9=-1", "Normalize param 9 (eps_mode) = -1"),
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


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
async def test_too_few_scales_for_the_channels_is_a_plan_error(tmp_path: Path, gpu: bool) -> None:
    """ncnn would read scales past their end: asyncvk names why."""
    case = Case("bad-shape", "Normalize 0=1 3=2", (3, 4, 4), 2)
    model = write_model(tmp_path, case.model_text(), [raw(np.ones(2, np.float32))])
    message = "Normalize has 2 scales (param 3 scale_data_size) but param 1 (channel_shared) = 0"
    with pytest.raises(InputError, match=re.escape(message)):
        await asyncvk_forward(model, {"in0": np.ones(case.shape, np.float32)}, ["out0"], gpu=gpu)
