"""DeformableConv2D against ncnn itself (the wheel's CPU fp32): the GPU path on lavapipe and the
CPU path, with and without the mask, over every param that changes the math (kernel, dilation,
stride, each pad, bias, each fused activation), odd sizes and offsets that sample outside the
image; bad params are a ModelFormatError naming the param, bad blob shapes an InputError.

Values are compared with the wheel within a tolerance: its last bit depends on the CPU it runs
on (ncnn_oracle), and its x86 build sums by im2col and gemm in another order."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import assert_close, asyncvk_forward, ncnn_forward, raw, tagged, write_model

from asyncvk import InputError
from asyncvk._errors import ModelFormatError

pytest.importorskip("ncnn")
pytestmark = needs_vulkan

RTOL = 2e-6


@dataclass(frozen=True)
class Case:
    """A DeformableConv2D of ``num_output`` over a (c, h, w) input with ``params`` (beside 0, 1,
    11 and 6), offsets of about ``spread`` pixels (multiples of ``step`` when set)."""

    id: str
    c: int
    h: int
    w: int
    num_output: int
    kernel: tuple[int, int]  # (kernel_h, kernel_w)
    params: str = ""
    mask: bool = True
    spread: float = 2.0
    step: float = 0.0

    def param(self, key: int, default: int) -> int:
        found = re.search(rf"(?:^| ){key}=(-?\d+)\b", self.params)
        return int(found.group(1)) if found else default

    def out_hw(self) -> tuple[int, int]:
        kh, kw = self.kernel
        dw = self.param(2, 1)
        dh = self.param(12, dw)
        sw = self.param(3, 1)
        sh = self.param(13, sw)
        left = self.param(4, 0)
        right = self.param(15, left)
        top = self.param(14, left)
        bottom = self.param(16, top)
        outh = (self.h + top + bottom - dh * (kh - 1) - 1) // sh + 1
        outw = (self.w + left + right - dw * (kw - 1) - 1) // sw + 1
        return outh, outw

    def weights(self) -> tuple[np.ndarray, np.ndarray | None]:
        rng = np.random.default_rng(zlib.crc32(self.id.encode()))
        kh, kw = self.kernel
        weight = rng.uniform(-1, 1, self.num_output * self.c * kh * kw).astype(np.float32)
        bias = rng.uniform(-1, 1, self.num_output).astype(np.float32)
        return weight, (bias if self.param(5, 0) else None)

    def model_text(self) -> str:
        kh, kw = self.kernel
        size = self.num_output * self.c * kh * kw
        bottoms = "in0 in1 in2" if self.mask else "in0 in1"
        inputs = 3 if self.mask else 2
        lines = [f"Input in{i} 0 1 in{i}" for i in range(inputs)]
        lines.append(
            f"DeformableConv2D op0 {inputs} 1 {bottoms} t0 0={self.num_output} 1={kw} 11={kh} "
            f"6={size} {self.params}"
        )
        # times 1 on the GPU after it: a layer sent to the CPU then shows in the plan
        lines.append("BinaryOp keep 1 1 t0 out 0=2 1=1 2=1")
        return f"7767517\n{len(lines)} {len(lines)}\n" + "\n".join(lines) + "\n"

    def inputs(self) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(zlib.crc32(self.id.encode()) + 1)
        kh, kw = self.kernel
        outh, outw = self.out_hw()
        offset = rng.uniform(-self.spread, self.spread, (2 * kh * kw, outh, outw))
        if self.step:
            offset = np.round(offset / self.step) * self.step
        result = {
            "in0": rng.uniform(-2, 2, (self.c, self.h, self.w)).astype(np.float32),
            "in1": offset.astype(np.float32),
        }
        if self.mask:
            result["in2"] = rng.uniform(-0.5, 1.5, (kh * kw, outh, outw)).astype(np.float32)
        return result


CASES = [
    Case("3x3-mask", 3, 7, 9, 4, (3, 3)),
    Case("3x3-no-mask", 3, 7, 9, 4, (3, 3), mask=False),
    Case("1x1", 5, 6, 7, 3, (1, 1), spread=1.5),
    Case("kernel-2x3-dilation-stride", 2, 9, 8, 3, (2, 3), "2=2 12=1 3=1 13=2"),
    Case("dilation-h-stride-w", 3, 11, 10, 2, (3, 2), "2=1 12=3 3=3 13=1", mask=False),
    Case("pads-each-side", 2, 6, 5, 3, (3, 3), "4=1 15=0 14=2 16=1"),
    Case("pads-all-bias", 4, 5, 5, 5, (3, 3), "4=1 5=1"),
    Case("odd-sizes", 7, 13, 11, 9, (5, 3), "3=2 4=2 14=1 5=1"),
    Case("one-pixel", 3, 1, 1, 2, (1, 1), spread=0.75),
    Case("single-row", 2, 1, 9, 3, (1, 3), "4=1", spread=1.0),
    # offsets that leave the image: far past every edge, and on the quarter-pixel grid so that
    # points fall exactly on -1, on 0, on h - 1 and on h (each edge rule counts there)
    Case("offsets-far-outside", 3, 5, 6, 2, (3, 3), "4=1 5=1", spread=12.0),
    Case("offsets-quarter-grid", 2, 4, 5, 3, (3, 3), "4=1", spread=3.0, step=0.25),
    Case("offsets-integer-grid", 3, 5, 4, 2, (2, 2), "5=1", spread=3.0, step=1.0, mask=False),
    # the fused activations (bias on, so sums straddle 0)
    Case("relu", 3, 6, 7, 4, (3, 3), "5=1 9=1"),
    Case("leakyrelu", 3, 6, 7, 4, (3, 3), "5=1 9=2 -23310=1,0.1"),
    Case("clip", 3, 6, 7, 4, (3, 3), "5=1 9=3 -23310=2,-0.5,0.75"),
    Case("sigmoid", 3, 6, 7, 4, (3, 3), "5=1 9=4", mask=False),
    Case("mish", 3, 6, 7, 4, (3, 3), "5=1 9=5"),
    Case("hardswish", 3, 6, 7, 4, (3, 3), "5=1 9=6 -23310=2,0.2,0.5"),
]


def _model(tmp_path: Path, c: Case):
    weight, bias = c.weights()
    blobs = [tagged(weight)] + ([raw(bias)] if bias is not None else [])
    return write_model(tmp_path, c.model_text(), blobs)


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
async def test_deformableconv2d_matches_ncnn_on_gpu_and_cpu(tmp_path: Path, c: Case) -> None:
    model = _model(tmp_path, c)
    inputs = c.inputs()
    theirs = ncnn_forward(model, inputs, ["out"])["out"]
    gpu, cpu_types = await asyncvk_forward(model, inputs, ["out"], gpu=True)
    assert "DeformableConv2D" not in cpu_types, "DeformableConv2D fell back to the CPU"
    assert_close(gpu["out"], theirs, "gpu", RTOL)
    cpu, _ = await asyncvk_forward(model, inputs, ["out"], gpu=False)
    assert_close(cpu["out"], theirs, "cpu", RTOL)


async def test_offsets_past_every_edge_leave_the_bias(tmp_path: Path) -> None:
    """Every point beyond -1 or h / w reads 0: only the bias is left (through the relu)."""
    c = Case("all-outside", 2, 4, 4, 3, (3, 3), "4=1 5=1 9=1")
    model = _model(tmp_path, c)
    inputs = c.inputs()
    inputs["in1"] = np.full_like(inputs["in1"], 40.0)
    _, bias = c.weights()
    assert bias is not None
    expected = np.broadcast_to(np.maximum(bias, 0)[:, None, None], (3, *c.out_hw()))
    theirs = ncnn_forward(model, inputs, ["out"])["out"]
    np.testing.assert_array_equal(theirs, expected)
    for gpu in (True, False):
        ours, _ = await asyncvk_forward(model, inputs, ["out"], gpu=gpu)
        np.testing.assert_array_equal(ours["out"], expected)


async def test_offset_channels_are_dy_then_dx_per_tap(tmp_path: Path) -> None:
    """A 1x2 kernel (taps (0, 0) and (0, 1)) moved by +1 row on tap 1 only: its channel 2 is
    that tap's dy, channel 3 its dx; the output is then a sum of shifted copies of the input."""
    c = Case("layout", 1, 4, 5, 1, (1, 2), mask=False)
    model = write_model(tmp_path, c.model_text(), [tagged(np.array([1.0, 10.0], np.float32))])
    x = np.arange(20, dtype=np.float32).reshape(1, 4, 5)
    offset = np.zeros((4, 4, 4), np.float32)
    offset[2] = 1.0  # tap 1: dy = 1
    theirs = ncnn_forward(model, {"in0": x, "in1": offset}, ["out"])["out"]
    below = np.vstack([x[0, 1:, 1:], np.zeros((1, 4), np.float32)])
    expected = x[0, :, :4] + 10 * below
    np.testing.assert_array_equal(theirs[0], expected)
    for gpu in (True, False):
        ours, _ = await asyncvk_forward(model, {"in0": x, "in1": offset}, ["out"], gpu=gpu)
        np.testing.assert_array_equal(ours["out"][0], expected)


BAD_PARAMS = [
    ("0=0 1=3 6=9", "DeformableConv2D param 0 num_output=0 must be > 0"),
    ("0=1 1=0 6=9", "DeformableConv2D params 1/11 kernel 0x0 must be > 0"),
    ("0=1 1=3 6=9 3=0", "DeformableConv2D params 2/12 dilation and 3/13 stride must be > 0"),
    ("0=2 1=3 6=9", "DeformableConv2D param 6 weight_data_size=9 is not a positive multiple"),
    ("0=1 1=3 6=9 4=-233", "DeformableConv2D params 4/15/14/16 pads (-233, -233, -233, -233)"),
    ("0=1 1=3 6=9 4=1 16=-1", "DeformableConv2D params 4/15/14/16 pads (1, 1, 1, -1)"),
    ("0=1 1=3 6=9 9=7", "DeformableConv2D param 9 activation_type=7 is not supported"),
    ("0=1 1=3 6=9 9=2", "DeformableConv2D param 10 activation_params needs 1 values"),
]


@pytest.mark.parametrize(("params", "message"), BAD_PARAMS, ids=[b[0] for b in BAD_PARAMS])
async def test_bad_params_name_file_line_layer_and_param(
    tmp_path: Path, params: str, message: str
) -> None:
    text = (
        "7767517\n3 3\nInput in0 0 1 in0\nInput in1 0 1 in1\n"
        f"DeformableConv2D op0 2 1 in0 in1 out {params}\n"
    )
    model = write_model(tmp_path, text, [tagged(np.ones(9, np.float32))])
    inputs = {"in0": np.ones((1, 5, 5), np.float32), "in1": np.ones((18, 3, 3), np.float32)}
    with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
        await asyncvk_forward(model, inputs, ["out"])
    assert (caught.value.file, caught.value.line, caught.value.layer) == (
        str(model.param),
        5,
        "op0",
    )


async def test_one_input_is_a_model_format_error(tmp_path: Path) -> None:
    text = "7767517\n2 2\nInput in0 0 1 in0\nDeformableConv2D op0 1 1 in0 out 0=1 1=3 6=9\n"
    model = write_model(tmp_path, text, [tagged(np.ones(9, np.float32))])
    with pytest.raises(ModelFormatError, match="DeformableConv2D takes 2 to 3 input blobs, got 1"):
        await asyncvk_forward(model, {"in0": np.ones((1, 5, 5), np.float32)}, ["out"])


BAD_SHAPES = [
    ((1, 5, 5), (16, 3, 3), None, "DeformableConv2D's offset must be (18, 3, 3)"),
    ((1, 5, 5), (18, 3, 4), None, "DeformableConv2D's offset must be (18, 3, 3)"),
    ((1, 5, 5), (18, 3, 3), (9, 2, 3), "DeformableConv2D's mask must be (9, 3, 3)"),
    ((2, 5, 5), (18, 3, 3), None, "expects 1 input channels, got 2"),
    ((5, 5), (18, 3, 3), None, "DeformableConv2D takes a dims 3 blob (c, h, w), got (5, 5)"),
    ((1, 2, 5), (18, 1, 3), None, "input 2x5 (padded 2x5) is smaller than the kernel"),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize(
    ("image", "offset", "mask", "message"), BAD_SHAPES, ids=[b[3][:40] for b in BAD_SHAPES]
)
async def test_blobs_the_layer_cannot_take_are_an_input_error(
    tmp_path: Path,
    image: tuple[int, ...],
    offset: tuple[int, ...],
    mask: tuple[int, ...] | None,
    message: str,
    gpu: bool,
) -> None:
    """ncnn reads past such blobs (it checks no shape): asyncvk names what it expected."""
    c = Case("bad-shape", 1, 5, 5, 1, (3, 3), mask=mask is not None)
    model = write_model(tmp_path, c.model_text(), [tagged(np.ones(9, np.float32))])
    inputs = {"in0": np.ones(image, np.float32), "in1": np.zeros(offset, np.float32)}
    if mask is not None:
        inputs["in2"] = np.ones(mask, np.float32)
    with pytest.raises(InputError, match=re.escape(message)):
        await asyncvk_forward(model, inputs, ["out"], gpu=gpu)
