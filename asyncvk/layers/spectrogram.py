"""Spectrogram and InverseSpectrogram, as ncnn's spectrogram.cpp and inversespectrogram.cpp: the
short-time Fourier transform of a 1-D signal by direct DFT sums, and its inverse by overlap-add
with the squared-window normalisation. numpy here, ``spectrogram.comp`` and the two
``inversespectrogram_*.comp`` passes on the GPU.

Layouts: Spectrogram gives (freqs, frames) for power 1 and 2 and (freqs, frames, 2) complex
pairs for power 0; InverseSpectrogram takes that (freqs, frames, 2), freqs = n_fft / 2 + 1
(one-sided) or n_fft, and gives (outsize, 2) for returns 0, (outsize,) for 1 (real) and 2
(imaginary).

The numpy path follows ncnn's float32 arithmetic, twiddles included: ncnn rounds each angle
``2 pi i k / n_fft`` to float32 before cosf/sinf, which is off the exact twiddle by up to ~1e-7
times ``i k``. The GPU reads an exact table of ``cos, sin(2 pi m / n_fft)`` indexed by ``i k``
mod n_fft instead (n_fft entries, not n_fft squared), so it is the closer to the true STFT:
the two differ by about 3e-8 x n_fft relative (ncnn's own error, 5e-5 at n_fft 2048).
"""

from __future__ import annotations

import math

import numpy as np

from ..gpu._memory import Buffer
from ._base import Layer, Shape
from ._gpu_api import (
    GpuBlob,
    GpuTarget,
    PipelineSpec,
    RecordContext,
    capped_groups,
    groups_1d,
    local_size_1d,
    pack_push,
)
from ._limits import MAX_EXTENT, check_shape
from ._paramdict import ParamDict
from ._registry import register_layer
from ._schema import Param, read_params

_F32 = np.float32
#: The largest n_fft: ncnn's direct DFT costs n_fft multiply-adds per value.
MAX_N_FFT = 1 << 16
#: Twiddle values the numpy path makes at once.
_TWIDDLE_BUDGET = 1 << 22
_LOCAL_2D = (8, 8, 1)
ONES, HANN, HAMMING = 0, 1, 2
CONSTANT, REPLICATE, REFLECT = 0, 1, 2


def window(n_fft: int, winlen: int, window_type: int) -> np.ndarray:
    """ncnn's window_data: ``winlen`` values centered in ``n_fft`` zeros, in float32."""
    i = np.arange(winlen, dtype=np.float64)
    cos = np.cos(_as_float(2 * math.pi * i / winlen)).astype(_F32)
    if window_type == HANN:
        values = _F32(0.5) * (_F32(1) - cos)
    elif window_type == HAMMING:
        values = _F32(0.54) - _F32(0.46) * cos
    else:
        values = np.ones(winlen, _F32)
    lead = (n_fft - winlen) // 2
    return np.concatenate([np.zeros(lead, _F32), values, np.zeros(n_fft - winlen - lead, _F32)])


def window_energy(win: np.ndarray) -> np.float32:
    """sqrt of ncnn's float32 running sum of the squared window."""
    return _F32(np.sqrt(np.cumsum(win * win, dtype=_F32)[-1]))


def _as_float(angle: np.ndarray) -> np.ndarray:
    """Double angles rounded to float32, as C passes them to cosf and sinf (whose float32
    results are the float64 ones rounded)."""
    return angle.astype(_F32).astype(np.float64)


def ncnn_twiddles(rows: np.ndarray, n_fft: int) -> tuple[np.ndarray, np.ndarray]:
    """ncnn's cosf, sinf of ``2 pi i k / n_fft`` (rounded to float32) for i in ``rows``, k <
    n_fft: (len(rows), n_fft) each."""
    angle = 2 * math.pi * rows.astype(np.float64)[:, None] * np.arange(n_fft)[None, :] / n_fft
    angle = _as_float(angle)
    return np.cos(angle).astype(_F32), np.sin(angle).astype(_F32)


def exact_twiddles(n_fft: int) -> np.ndarray:
    """(cos, sin) of ``2 pi m / n_fft`` for m < n_fft, interleaved: the GPU's table."""
    angle = 2 * math.pi * np.arange(n_fft, dtype=np.float64) / n_fft
    return np.stack([np.cos(angle), np.sin(angle)], axis=1).reshape(-1).astype(_F32)


def _chunks(count: int, n_fft: int) -> list[np.ndarray]:
    """Row ranges of twiddle tables that stay within the budget."""
    step = max(1, _TWIDDLE_BUDGET // n_fft)
    return [np.arange(s, min(count, s + step)) for s in range(0, count, step)]


class _StftParams(Layer):
    """The params both types share, and their checks."""

    n_fft = Param(0, int, 0, limit=MAX_N_FFT)
    hoplen = Param(2, int, 0, limit=MAX_EXTENT)  # n_fft / 4 where the file has none
    winlen = Param(3, int, 0, limit=MAX_N_FFT)  # n_fft where the file has none
    window_type = Param(4, int, ONES)
    center = Param(5, int, 1)
    normalized = Param(7, int, 0)

    gpu = True

    def load_param(self, pd: ParamDict) -> None:
        read_params(self, self.params, pd)
        # the defaults ncnn computes from n_fft (a Param default can only name another param)
        if 2 not in pd:
            self.__dict__["hoplen"] = self.n_fft // 4
        if 3 not in pd:
            self.__dict__["winlen"] = self.n_fft
        self.validate()

    def validate(self) -> None:
        name = self.type_name
        if self.n_fft < 1:
            raise ValueError(f"{name} param 0 n_fft={self.n_fft} must be >= 1")
        if self.hoplen < 1:
            raise ValueError(
                f"{name} param 2 hoplen={self.hoplen} must be >= 1 (n_fft / 4 when not given)"
            )
        if not 1 <= self.winlen <= self.n_fft:
            raise ValueError(f"{name} param 3 winlen={self.winlen} must be 1..n_fft={self.n_fft}")
        if self.window_type not in (ONES, HANN, HAMMING):
            raise ValueError(
                f"{name} param 4 window_type={self.window_type} must be 0 (ones), 1 (hann) "
                "or 2 (hamming)"
            )
        if self.center not in (0, 1):
            raise ValueError(f"{name} param 5 center={self.center} must be 0 or 1")
        if self.normalized not in (0, 1, 2):
            raise ValueError(
                f"{name} param 7 normalized={self.normalized} must be 0 (no), 1 (n_fft) "
                "or 2 (window energy)"
            )

    @property
    def win(self) -> np.ndarray:
        """ncnn's window_data (n_fft values)."""
        return window(self.n_fft, self.winlen, self.window_type)

    def gpu_weights(self, target: GpuTarget) -> dict[str, np.ndarray]:
        return {"window": self.win, "twiddle": exact_twiddles(self.n_fft)}


@register_layer("Spectrogram")
class Spectrogram(_StftParams):
    """0 n_fft, 1 power (0 complex, 1 magnitude, 2 power), 2 hoplen, 3 winlen, 4 window_type,
    5 center, 6 pad_type (0 constant, 1 replicate, 2 reflect), 7 normalized, 8 onesided.
    Input: a 1-D signal."""

    power = Param(1, int, 0)
    pad_type = Param(6, int, REFLECT)
    onesided = Param(8, int, 1)

    def validate(self) -> None:
        super().validate()
        if self.power not in (0, 1, 2):
            raise ValueError(
                f"Spectrogram param 1 power={self.power} must be 0 (complex), 1 (magnitude) "
                "or 2 (power)"
            )
        if self.pad_type not in (CONSTANT, REPLICATE, REFLECT):
            raise ValueError(
                f"Spectrogram param 6 pad_type={self.pad_type} must be 0 (constant), "
                "1 (replicate) or 2 (reflect)"
            )
        if self.onesided not in (0, 1):
            raise ValueError(f"Spectrogram param 8 onesided={self.onesided} must be 0 or 1")

    @property
    def norm(self) -> np.float32:
        """What ncnn scales each bin by (1 when not normalized)."""
        if self.normalized == 1:
            return _F32(1 / math.sqrt(self.n_fft))
        if self.normalized == 2:
            return _F32(1) / window_energy(self.win)
        return _F32(1)

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        if len(shape) != 1:
            raise ValueError(f"Spectrogram takes a 1-D signal, got shape {shape}")
        (w,) = shape
        half = self.n_fft // 2
        if self.center and self.pad_type == REFLECT and half >= w:
            raise ValueError(
                f"Spectrogram's reflect padding of n_fft / 2 = {half} needs a signal longer "
                f"than that, got {w}"
            )
        size = w + 2 * half if self.center else w
        if size < self.n_fft:
            raise ValueError(f"Spectrogram's signal of {size} is shorter than n_fft={self.n_fft}")
        frames = (size - self.n_fft) // self.hoplen + 1
        freqs = self.n_fft // 2 + 1 if self.onesided else self.n_fft
        return [(freqs, frames, 2) if self.power == 0 else (freqs, frames)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        x = np.asarray(inputs[0], _F32)
        (out_shape,) = self.output_shapes([x.shape])
        n, frames = self.n_fft, out_shape[1]
        if self.center:
            half_n = n // 2
            if self.pad_type == CONSTANT:
                x = np.pad(x, half_n, mode="constant")
            else:
                x = np.pad(x, half_n, mode="edge" if self.pad_type == REPLICATE else "reflect")
        check_shape((frames, n), "Spectrogram frames")
        windowed = np.lib.stride_tricks.sliding_window_view(x, n)[:: self.hoplen] * self.win
        half = n // 2 + 1
        re = np.empty((half, frames), _F32)
        im = np.empty((half, frames), _F32)
        for rows in _chunks(half, n):
            cos, sin = ncnn_twiddles(rows, n)
            re[rows] = cos @ windowed.T
            im[rows] = -(sin @ windowed.T)
        norm = self.norm
        re, im = re * norm, im * norm
        if not self.onesided:  # the upper half: conjugates of the lower, mirrored
            re = np.concatenate([re, re[1 : n - half + 1][::-1]])
            im = np.concatenate([im, -im[1 : n - half + 1][::-1]])
        if self.power == 0:
            return [np.stack([re, im], axis=-1).astype(_F32)]
        square = re * re + im * im
        return [(np.sqrt(square) if self.power == 1 else square).astype(_F32)]

    # -- GPU -------------------------------------------------------------------------------

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        constants = (
            self.n_fft,
            self.hoplen,
            self.power,
            self.center,
            self.pad_type,
            float(self.norm),
        )
        return {"stft": PipelineSpec("spectrogram", constants, _LOCAL_2D)}

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        (w,) = inputs[0].shape
        freqs, frames = outputs[0].shape[:2]
        push = pack_push("3i", w, frames, freqs)
        groups = capped_groups((math.ceil(frames / 8), math.ceil(freqs / 8), 1), ctx.info)
        buffers: list[Buffer | GpuBlob] = [inputs[0], outputs[0]]
        buffers += [ctx.weight("window"), ctx.weight("twiddle")]
        ctx.dispatch("stft", buffers, push, groups)


@register_layer("InverseSpectrogram")
class InverseSpectrogram(_StftParams):
    """0 n_fft, 1 returns (0 complex, 1 real, 2 imaginary), 2 hoplen, 3 winlen,
    4 window_type, 5 center, 7 normalized. Input: (freqs, frames, 2)."""

    returns = Param(1, int, 0)

    def validate(self) -> None:
        super().validate()
        if self.returns not in (0, 1, 2):
            raise ValueError(
                f"InverseSpectrogram param 1 returns={self.returns} must be 0 (complex), "
                "1 (real) or 2 (imaginary)"
            )

    @property
    def norm(self) -> np.float32:
        """What ncnn scales each bin by before the inverse DFT (1 when not normalized)."""
        if self.normalized == 1:
            return _F32(math.sqrt(self.n_fft))
        if self.normalized == 2:
            return window_energy(self.win)
        return _F32(1)

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        n = self.n_fft
        if len(shape) != 3 or shape[2] != 2 or shape[0] not in (n // 2 + 1, n):
            raise ValueError(
                f"InverseSpectrogram takes (freqs, frames, 2) complex pairs with freqs "
                f"{n // 2 + 1} or {n} (n_fft {n}), got shape {shape}"
            )
        frames = shape[1]
        outsize = (frames - 1) * self.hoplen + (n % 2 if self.center else n)
        if outsize < 1:
            raise ValueError(
                f"InverseSpectrogram's {frames} frame(s) give no samples (n_fft {n}, center)"
            )
        check_shape((frames, n, 2), "InverseSpectrogram frames")  # both paths hold them
        return [(outsize, 2) if self.returns == 0 else (outsize,)]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        spec = np.asarray(inputs[0], _F32)
        (out_shape,) = self.output_shapes([spec.shape])
        n, frames, outsize = self.n_fft, spec.shape[1], out_shape[0]
        norm, win = self.norm, self.win
        a = (spec[..., 0] * norm).T  # (frames, freqs)
        b = (spec[..., 1] * norm).T
        if spec.shape[0] != n:  # one-sided: the upper bins are conjugates of the lower
            a = np.concatenate([a, a[:, 1 : n - n // 2][:, ::-1]], axis=1)
            b = np.concatenate([b, -b[:, 1 : n - n // 2][:, ::-1]], axis=1)
        re = np.empty((frames, n), _F32)
        im = np.empty((frames, n), _F32)
        for rows in _chunks(n, n):
            cos, sin = ncnn_twiddles(rows, n)
            re[:, rows] = a @ cos.T - b @ sin.T
            im[:, rows] = a @ sin.T + b @ cos.T
        re = re / _F32(n) * win
        im = im / _F32(n) * win
        # overlap-add, frames in order as ncnn adds them
        index = np.arange(frames)[:, None] * self.hoplen + np.arange(n)[None, :]
        if self.center:
            index -= n // 2
        keep = (index >= 0) & (index < outsize)
        at = index[keep]
        sums = np.zeros((3, outsize), _F32)
        np.add.at(sums[0], at, re[keep])
        np.add.at(sums[1], at, im[keep])
        np.add.at(sums[2], at, np.broadcast_to(win * win, re.shape)[keep])
        scale = np.where(sums[2] != 0, sums[2], _F32(1))
        out = sums[:2] / scale
        if self.returns == 0:
            return [np.ascontiguousarray(out.T, _F32)]
        return [out[self.returns - 1].astype(_F32)]

    # -- GPU -------------------------------------------------------------------------------

    def pipeline_specs(self, target: GpuTarget) -> dict[str, PipelineSpec]:
        frames = PipelineSpec(
            "inversespectrogram_frames", (self.n_fft, float(self.norm)), _LOCAL_2D
        )
        overlap = (self.n_fft, self.hoplen, self.center, self.returns)
        local = local_size_1d(target.info)
        return {
            "frames": frames,
            "overlap": PipelineSpec("inversespectrogram_overlap", overlap, local),
        }

    def record(self, ctx: RecordContext, inputs: list[GpuBlob], outputs: list[GpuBlob]) -> None:
        freqs, frames, _ = inputs[0].shape
        n = self.n_fft
        outsize = outputs[0].shape[0]
        scratch = ctx.scratch(4 * 2 * frames * n)
        window_buf, twiddle = ctx.weight("window"), ctx.weight("twiddle")
        groups = capped_groups((math.ceil(n / 8), math.ceil(frames / 8), 1), ctx.info)
        push = pack_push("2i", frames, int(freqs != n))
        ctx.dispatch("frames", [inputs[0], scratch, window_buf, twiddle], push, groups)
        ctx.barrier()
        local = local_size_1d(ctx.info)
        push = pack_push("2i", frames, outsize)
        ctx.dispatch(
            "overlap", [scratch, outputs[0], window_buf], push, groups_1d(outsize, local, ctx.info)
        )
