"""One weighted layer against ncnn itself, shared by the test files of the convolution and
pooling variants: a case is one layer line with its weights and input shape; a check runs it
on asyncvk's GPU or CPU path and the wheel, or expects the load or the plan to refuse it."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from ncnn_oracle import assert_close, asyncvk_forward, ncnn_forward, raw, tagged, write_model

from asyncvk import InputError
from asyncvk._errors import ModelFormatError

#: each fused activation (params 9 and 10) once
ACTIVATIONS = {
    "relu": "9=1",
    "leaky": "9=2 -23310=1,0.1",
    "clip": "9=3 -23310=2,-0.5,0.5",
    "sigmoid": "9=4",
    "mish": "9=5",
    "hardswish": "9=6 -23310=2,0.2,0.5",
}


@dataclass(frozen=True)
class Case:
    """One layer line (``type params``), its weights, and the shape of its one input."""

    id: str
    layer: str
    shape: tuple[int, ...]
    weights: tuple[int, ...] = ()  # weight (tagged) then bias (raw), as ncnn reads them

    def model_text(self) -> str:
        kind, _, params = self.layer.partition(" ")
        # times 1 on the GPU after it: a layer sent to the CPU then shows in the plan
        return (
            "7767517\n3 3\nInput in0 0 1 in0\n"
            f"{kind} op0 1 1 in0 out0 {params}\n"
            "BinaryOp keep 1 1 out0 out1 0=2 1=1 2=1\n"
        )


async def check_matches_ncnn(tmp_path: Path, case: Case, gpu: bool) -> None:
    """The case's output against the wheel's, and no layer sent to the CPU."""
    rng = np.random.default_rng(zlib.crc32(case.id.encode()))
    weights = [
        (tagged if i == 0 else raw)(rng.normal(0, 0.5, n).astype(np.float32))
        for i, n in enumerate(case.weights)
    ]
    model = write_model(tmp_path, case.model_text(), weights)
    inputs = {"in0": rng.normal(0.3, 1.5, case.shape).astype(np.float32)}
    theirs = ncnn_forward(model, inputs, ["out1"])["out1"]
    ours, cpu_types = await asyncvk_forward(model, inputs, ["out1"], gpu=gpu)
    assert_close(ours["out1"], theirs, case.id)
    assert cpu_types == set(), f"fell back to the CPU: {cpu_types}"


def _weights(layer: str) -> list[bytes]:
    """Ones for the weight_data_size (param 6) the line names, if it names one."""
    sized = re.search(r" 6=(\d+)", layer)
    return [tagged(np.ones(int(sized[1])))] if sized else []


async def check_bad_params(
    tmp_path: Path, layer: str, message: str, weights: int, shape: tuple[int, ...]
) -> None:
    """Loading ``layer`` (with ``weights`` ones) is a ModelFormatError that says ``message``
    and names the file, line and layer."""
    model = write_model(tmp_path, Case("bad", layer, ()).model_text(), [tagged(np.ones(weights))])
    with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
        await asyncvk_forward(model, {"in0": np.ones(shape, np.float32)}, ["out0"])
    where = (caught.value.file, caught.value.line, caught.value.layer)
    assert where == (str(model.param), 4, "op0")


async def check_bad_shape(
    tmp_path: Path, layer: str, shape: tuple[int, ...], message: str, gpu: bool
) -> None:
    """An input of ``shape`` is an InputError that says ``message``, on either path."""
    model = write_model(tmp_path, Case("bad", layer, shape).model_text(), _weights(layer))
    with pytest.raises(InputError, match=re.escape(message)):
        await asyncvk_forward(model, {"in0": np.ones(shape, np.float32)}, ["out0"], gpu=gpu)
