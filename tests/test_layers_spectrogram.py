"""Spectrogram and InverseSpectrogram against ncnn itself (the wheel's CPU fp32): the GPU path on
lavapipe and the CPU path, over every param that changes the math (n_fft even and odd, power,
hoplen, winlen, window_type, center, pad_type, normalized, onesided, returns), odd lengths and
a one-sided and a two-sided inverse; bad params are a ModelFormatError naming the param, blobs
the layers cannot take an InputError.

Tolerances: the CPU path follows ncnn's float32 DFT, twiddles included (ncnn rounds each angle
2 pi i k / n_fft to float32 first), so it stays within a few float32 steps of a sum of n_fft
terms. The GPU reads exact twiddles: it differs from ncnn by ncnn's own angle rounding, which
grows with n_fft (about 3e-8 x n_fft relative, measured)."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import assert_close, asyncvk_forward, ncnn_forward, write_model

from asyncvk import InputError
from asyncvk._errors import ModelFormatError

pytest.importorskip("ncnn")
pytestmark = needs_vulkan

CPU_RTOL = 5e-6


def gpu_rtol(n_fft: int, cancels: bool = False) -> float:
    """ncnn's angle rounding, relative: about 3e-8 x n_fft (2x for a squared magnitude); 10x
    where the output is what cancellation leaves (the imaginary part of a one-sided inverse:
    the conjugate pairs cancel exactly with exact twiddles, to ncnn's rounding in ncnn)."""
    return (2e-6 + 2e-7 * n_fft) * (10 if cancels else 1)


@dataclass(frozen=True)
class Case:
    """One layer line ``kind params`` run on an input of ``shape``."""

    id: str
    kind: str
    params: str
    shape: tuple[int, ...]
    cancels: bool = False

    @property
    def n_fft(self) -> int:
        found = re.search(r"(?:^| )0=(\d+)", self.params)
        assert found
        return int(found.group(1))

    def model_text(self) -> str:
        return (
            "7767517\n3 3\nInput in0 0 1 in0\n"
            f"{self.kind} op0 1 1 in0 t0 {self.params}\n"
            # times 1 on the GPU after it: a layer sent to the CPU then shows in the plan
            "BinaryOp keep 1 1 t0 out 0=2 1=1 2=1\n"
        )

    def inputs(self) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(zlib.crc32(self.id.encode()))
        return {"in0": rng.uniform(-1, 1, self.shape).astype(np.float32)}


def stft(id: str, params: str, length: int) -> Case:
    return Case(id, "Spectrogram", params, (length,))


def istft(id: str, params: str, freqs: int, frames: int, cancels: bool = False) -> Case:
    return Case(id, "InverseSpectrogram", params, (freqs, frames, 2), cancels)


STFT_CASES = [
    stft("defaults", "0=16", 50),
    stft("power-magnitude", "0=16 1=1", 50),
    stft("power-square", "0=16 1=2", 50),
    stft("odd-n-fft", "0=15 2=4", 37),
    stft("hop-not-dividing", "0=12 2=5", 41),
    stft("hann", "0=16 2=4 4=1", 47),
    stft("hamming-odd", "0=17 2=3 4=2 1=1", 53),
    stft("winlen-short-even", "0=16 3=10 4=1", 45),
    stft("winlen-short-odd", "0=16 3=9 4=2 1=2", 45),
    stft("winlen-odd-n-fft", "0=15 3=8 4=1", 39),
    stft("no-center", "0=16 2=4 5=0", 50),
    stft("no-center-odd", "0=15 2=7 5=0 1=1", 64),
    stft("pad-constant", "0=16 6=0 4=1", 29),
    stft("pad-replicate", "0=16 6=1 4=1", 29),
    stft("pad-reflect-short", "0=16 6=2", 9),
    stft("pad-constant-shorter-than-n-fft", "0=16 6=0", 3),
    stft("normalized-n-fft", "0=16 7=1 4=1", 40),
    stft("normalized-window", "0=16 7=2 4=1 3=12", 40),
    stft("two-sided", "0=16 8=0 4=1", 40),
    stft("two-sided-odd", "0=15 8=0 1=1 4=2", 40),
    stft("two-sided-odd-complex", "0=15 8=0 4=1 2=4", 40),
    stft("two-sided-power", "0=14 8=0 1=2 7=1", 33),
    stft("whisper-like", "0=400 2=160 4=1 1=2", 1601),
    stft("large-odd", "0=255 2=64 4=2 7=2", 701),
]

ISTFT_CASES = [
    istft("defaults", "0=16", 9, 7),
    istft("real", "0=16 1=1", 9, 7),
    istft("imag", "0=16 1=2", 9, 7, cancels=True),
    istft("two-sided", "0=16 1=0", 16, 7),
    istft("two-sided-imag", "0=16 1=2 4=2", 16, 7),
    istft("two-sided-real", "0=16 1=1 4=1", 16, 6),
    istft("odd-n-fft", "0=15 2=4 1=1", 8, 9),
    istft("odd-n-fft-two-sided", "0=15 2=4", 15, 9),
    istft("hann", "0=16 2=4 4=1 1=1", 9, 11),
    istft("hamming", "0=16 2=3 4=2", 9, 11),
    istft("winlen-short", "0=16 3=10 4=1 1=1", 9, 8),
    istft("winlen-short-odd", "0=15 3=8 4=2", 8, 8),
    istft("no-center", "0=16 5=0 1=1 4=1", 9, 6),
    istft("no-center-odd", "0=13 2=5 5=0", 7, 6),
    istft("hop-wider-than-window", "0=8 2=11 4=1 1=1", 5, 5),
    istft("normalized-n-fft", "0=16 7=1", 9, 7),
    istft("normalized-window", "0=16 7=2 4=1 3=12 1=2", 9, 7, cancels=True),
    istft("one-frame-odd", "0=9 1=1", 5, 1),
    istft("large", "0=400 2=160 4=1 1=1", 201, 12),
]


async def _check(tmp_path: Path, c: Case, gpu_tolerance: float) -> None:
    model = write_model(tmp_path, c.model_text())
    inputs = c.inputs()
    theirs = ncnn_forward(model, inputs, ["out"])["out"]
    gpu, cpu_types = await asyncvk_forward(model, inputs, ["out"], gpu=True)
    assert c.kind not in cpu_types, f"{c.kind} fell back to the CPU"
    assert_close(gpu["out"], theirs, "gpu", gpu_tolerance)
    cpu, _ = await asyncvk_forward(model, inputs, ["out"], gpu=False)
    assert_close(cpu["out"], theirs, "cpu", CPU_RTOL)


@pytest.mark.parametrize("c", STFT_CASES, ids=[c.id for c in STFT_CASES])
async def test_spectrogram_matches_ncnn_on_gpu_and_cpu(tmp_path: Path, c: Case) -> None:
    await _check(tmp_path, c, gpu_rtol(c.n_fft))


@pytest.mark.parametrize("c", ISTFT_CASES, ids=[c.id for c in ISTFT_CASES])
async def test_inverse_spectrogram_matches_ncnn_on_gpu_and_cpu(tmp_path: Path, c: Case) -> None:
    await _check(tmp_path, c, gpu_rtol(c.n_fft, c.cancels))


@pytest.mark.parametrize(
    "params",
    ["0=16 2=4 4=1", "0=15 2=3 4=2", "0=16 2=4 4=1 7=1", "0=20 2=5 4=1 7=2", "0=16 4=0 2=8"],
)
async def test_the_inverse_gives_back_the_signal(tmp_path: Path, params: str) -> None:
    """Spectrogram (complex) then InverseSpectrogram (real) on the GPU: the signal again, as
    in ncnn (its ends too: the reflect padding's frames cover them)."""
    text = (
        "7767517\n3 3\nInput in0 0 1 in0\n"
        f"Spectrogram stft 1 1 in0 spec {params} 1=0\n"
        f"InverseSpectrogram istft 1 1 spec out {params} 1=1\n"
    )
    model = write_model(tmp_path, text)
    n_fft = int(params.split()[0][2:])
    hop = int(re.search(r"2=(\d+)", params).group(1))  # type: ignore[union-attr]
    length = 10 * hop + n_fft % 2  # the inverse gives (frames - 1) * hop + n_fft % 2 back
    x = np.random.default_rng(7).uniform(-1, 1, length).astype(np.float32)
    theirs = ncnn_forward(model, {"in0": x}, ["out"])["out"]
    np.testing.assert_allclose(theirs, x, atol=2e-5)
    gpu, cpu_types = await asyncvk_forward(model, {"in0": x}, ["out"], gpu=True)
    assert not {"Spectrogram", "InverseSpectrogram"} & cpu_types
    np.testing.assert_allclose(gpu["out"], x, atol=2e-5)
    cpu, _ = await asyncvk_forward(model, {"in0": x}, ["out"], gpu=False)
    assert_close(cpu["out"], theirs, "cpu", CPU_RTOL)


BAD_PARAMS = [
    ("Spectrogram", "0=0", "Spectrogram param 0 n_fft=0 must be >= 1"),
    ("Spectrogram", "0=3", "Spectrogram param 2 hoplen=0 must be >= 1"),
    ("Spectrogram", "0=16 2=0", "Spectrogram param 2 hoplen=0 must be >= 1"),
    ("Spectrogram", "0=16 1=3", "Spectrogram param 1 power=3 must be 0 (complex)"),
    ("Spectrogram", "0=16 3=17", "Spectrogram param 3 winlen=17 must be 1..n_fft=16"),
    ("Spectrogram", "0=16 3=0", "Spectrogram param 3 winlen=0 must be 1..n_fft=16"),
    ("Spectrogram", "0=16 4=3", "Spectrogram param 4 window_type=3 must be 0 (ones)"),
    ("Spectrogram", "0=16 5=2", "Spectrogram param 5 center=2 must be 0 or 1"),
    ("Spectrogram", "0=16 6=3", "Spectrogram param 6 pad_type=3 must be 0 (constant)"),
    ("Spectrogram", "0=16 7=3", "Spectrogram param 7 normalized=3 must be 0 (no)"),
    ("Spectrogram", "0=16 8=2", "Spectrogram param 8 onesided=2 must be 0 or 1"),
    ("Spectrogram", "0=100000", "Spectrogram param 0 (n_fft) = 100000 exceeds the limit"),
    ("InverseSpectrogram", "0=-4", "InverseSpectrogram param 0 n_fft=-4 must be >= 1"),
    ("InverseSpectrogram", "0=16 1=3", "InverseSpectrogram param 1 returns=3 must be 0"),
    ("InverseSpectrogram", "0=16 2=-1", "InverseSpectrogram param 2 hoplen=-1 must be >= 1"),
    ("InverseSpectrogram", "0=8 3=9", "InverseSpectrogram param 3 winlen=9 must be 1..n_fft=8"),
    ("InverseSpectrogram", "0=16 4=-1", "InverseSpectrogram param 4 window_type=-1 must be"),
    ("InverseSpectrogram", "0=16 5=-1", "InverseSpectrogram param 5 center=-1 must be 0 or 1"),
    ("InverseSpectrogram", "0=16 7=4", "InverseSpectrogram param 7 normalized=4 must be"),
]


@pytest.mark.parametrize(("kind", "params", "message"), BAD_PARAMS, ids=[b[2] for b in BAD_PARAMS])
async def test_bad_params_name_file_line_layer_and_param(
    tmp_path: Path, kind: str, params: str, message: str
) -> None:
    c = Case("bad", kind, params, (32,))
    model = write_model(tmp_path, c.model_text())
    with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
        await asyncvk_forward(model, c.inputs(), ["out"])
    assert (caught.value.file, caught.value.line, caught.value.layer) == (
        str(model.param),
        4,
        "op0",
    )


BAD_SHAPES = [
    (Case("2-D signal", "Spectrogram", "0=16", (4, 40)), "Spectrogram takes a 1-D signal"),
    (stft("reflect past the signal", "0=16", 8), "reflect padding of n_fft / 2 = 8 needs"),
    (stft("short without center", "0=16 5=0", 15), "signal of 15 is shorter than n_fft=16"),
    (istft("freqs neither half nor full", "0=16", 10, 4), "with freqs 9 or 16 (n_fft 16)"),
    (Case("not pairs", "InverseSpectrogram", "0=16", (9, 4, 3)), "got shape (9, 4, 3)"),
    (Case("2-D spectrum", "InverseSpectrogram", "0=16", (9, 4)), "got shape (9, 4)"),
    (istft("no samples", "0=16", 9, 1), "1 frame(s) give no samples (n_fft 16, center)"),
]


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize(("c", "message"), BAD_SHAPES, ids=[b[0].id for b in BAD_SHAPES])
async def test_blobs_the_layers_cannot_take_are_an_input_error(
    tmp_path: Path, c: Case, message: str, gpu: bool
) -> None:
    """ncnn reads past such blobs, or fails without a word: asyncvk names why."""
    model = write_model(tmp_path, c.model_text())
    with pytest.raises(InputError, match=re.escape(message)):
        await asyncvk_forward(model, c.inputs(), ["out"], gpu=gpu)
