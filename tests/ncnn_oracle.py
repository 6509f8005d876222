"""ncnn itself as the oracle: run one small model through the ``ncnn`` wheel (CPU, fp32) and
through asyncvk (GPU on lavapipe, or its CPU path), from the same .param and .bin files.

Tests build a model as param text plus its weights in file order::

    model = write_model(tmp_path, PARAM_TEXT, [tagged(weight), raw(bias)])
    ours, cpu_types = await asyncvk_forward(model, {"in0": x}, ["out0"])
    theirs = ncnn_forward(model, {"in0": x}, ["out0"])

``tagged`` writes a weight the way ncnn's ``ModelBin::load(w, 0)`` reads it (a 4-byte zero tag,
then raw float32); ``raw`` the way ``load(w, 1)`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asyncvk import Net, Option
from asyncvk.net._plan import _CpuStep


@dataclass(frozen=True)
class Model:
    param: Path
    bin: Path


def tagged(values: np.ndarray) -> bytes:
    """A weight as ncnn's ``load(w, 0)`` reads it: tag 0 (float32), then the values."""
    return bytes(4) + np.ascontiguousarray(values, np.float32).tobytes()


def raw(values: np.ndarray) -> bytes:
    """A weight as ncnn's ``load(w, 1)`` reads it: raw float32."""
    return np.ascontiguousarray(values, np.float32).tobytes()


def write_model(
    folder: Path, param_text: str, weights: Sequence[bytes] = (), name: str = "m"
) -> Model:
    """Write ``name``.param (``param_text``, dedented lines) and ``name``.bin (``weights``)."""
    lines = [line.strip() for line in param_text.strip().splitlines()]
    param = folder / f"{name}.param"
    param.write_text("\n".join(lines) + "\n")
    model_bin = folder / f"{name}.bin"
    model_bin.write_bytes(b"".join(weights))
    return Model(param, model_bin)


def ncnn_forward(
    model: Model,
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    **options: bool,
) -> dict[str, np.ndarray]:
    """ncnn's CPU fp32 outputs (fp16 and bf16 off, so only float32 rounding differs).

    ``options`` sets more of ncnn's Option, e.g. ``use_int8_inference=False`` (on by default:
    layers with int8 scales run int8) or ``use_packing_layout=False``."""
    ncnn = pytest.importorskip("ncnn")
    net = ncnn.Net()
    opt = net.opt
    opt.use_vulkan_compute = False
    opt.use_fp16_packed = False
    opt.use_fp16_storage = False
    opt.use_fp16_arithmetic = False
    opt.use_bf16_storage = False
    opt.num_threads = 1
    for name, value in options.items():
        setattr(opt, name, value)
    if net.load_param(str(model.param)) != 0:
        raise AssertionError(f"ncnn cannot load {model.param}")
    if net.load_model(str(model.bin)) != 0:
        raise AssertionError(f"ncnn cannot read {model.bin}")
    result = _extract(ncnn, net, inputs, outputs)
    net.clear()  # after every extractor and Mat is gone: ncnn aborts otherwise
    return result


def _extract(
    ncnn: Any, net: Any, inputs: dict[str, np.ndarray], outputs: list[str]
) -> dict[str, np.ndarray]:
    result = {}
    for name in outputs:
        ex = net.create_extractor()
        for in_name, array in inputs.items():
            # a Mat over numpy's memory has no refcount, and ncnn's light mode reads it
            # (a null pointer) before an in-place first layer: give ncnn its own copy
            ex.input(in_name, ncnn.Mat(np.ascontiguousarray(array, np.float32)).clone())
        status, mat = ex.extract(name)
        if status != 0:
            raise AssertionError(f"ncnn cannot extract {name!r} (status {status})")
        # an empty Mat (DetectionOutput with nothing detected) crashes the wheel's conversion
        empty = mat.empty()
        result[name] = np.zeros(0, np.float32) if empty else np.array(mat, np.float32, copy=True)
        del mat
        ex.clear()
        del ex
    return result


async def asyncvk_forward(
    model: Model,
    inputs: dict[str, np.ndarray],
    outputs: list[str],
    gpu: bool = True,
) -> tuple[dict[str, np.ndarray], set[str]]:
    """asyncvk's outputs, and the types of the layers that ran on the CPU on the way."""
    result: dict[str, np.ndarray] = {}
    async with Net(Option(use_vulkan_compute=gpu)) as net:
        await net.load_param(model.param)
        await net.load_model(model.bin)
        for name in outputs:
            ex = net.create_extractor()
            for in_name, array in inputs.items():
                ex.input(in_name, array)
            result[name] = await ex.extract(name)
        return result, cpu_layer_types(net) if gpu else set()


def cpu_layer_types(net: Net) -> set[str]:
    """The types of the layers that the plans made so far run on the CPU."""
    plans = [plan for pool in net._plans.values() for plan in pool]
    return {
        step.node.layer.type_name
        for plan in plans
        for step in plan.steps
        if isinstance(step, _CpuStep)
    }


def assert_close(ours: np.ndarray, theirs: np.ndarray, what: str, rtol: float = 1e-4) -> None:
    """Same shape (as numpy sees ncnn's Mat) and a relative L2 error under ``rtol``."""
    assert ours.shape == theirs.shape, f"{what}: shape {ours.shape}, ncnn {theirs.shape}"
    diff = float(np.linalg.norm(ours.astype(np.float64) - theirs))
    scale = float(np.linalg.norm(theirs.astype(np.float64)))
    assert np.isfinite(ours).all() == np.isfinite(theirs).all(), f"{what}: non-finite values"
    assert diff <= rtol * max(scale, 1e-30), f"{what}: rel L2 {diff / max(scale, 1e-30):.2e}"


async def assert_gpu_and_cpu_match_ncnn(
    model: Model,
    inputs: dict[str, np.ndarray],
    gpu_type: str,
    output: str = "out0",
    rtol: float = 1e-4,
) -> None:
    """ncnn's output against asyncvk's GPU path (``gpu_type`` must not fall back to the CPU)
    and its CPU path."""
    theirs = ncnn_forward(model, inputs, [output])[output]
    gpu, cpu_types = await asyncvk_forward(model, inputs, [output], gpu=True)
    assert gpu_type not in cpu_types, f"{gpu_type} fell back to the CPU"
    assert_close(gpu[output], theirs, "gpu", rtol)
    cpu, _ = await asyncvk_forward(model, inputs, [output], gpu=False)
    assert_close(cpu[output], theirs, "cpu", rtol)
