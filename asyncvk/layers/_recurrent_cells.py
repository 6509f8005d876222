"""The cells of ncnn's RNN, LSTM and GRU: their weights in ncnn's file order and their float32
numpy steps (rnn.cpp, lstm.cpp, gru.cpp), shared by the layers' CPU path and their tests.

Each direction reads, in this order, ``weight_xc`` (gates * hidden rows of ``size``),
``bias_c`` (``bias_rows`` rows of hidden), ``weight_hc`` (gates * hidden rows of num_output)
and, for an LSTM whose hidden_size is not num_output, ``weight_hr`` (num_output rows of
hidden_size, the projection). All directions of one array come in one tagged buffer.

Gate rows, as ncnn stores them: LSTM I, F, O, G (bias rows the same); GRU R, U, N with bias rows
R, U, WN (added outside the reset product) and BN (inside it); RNN one row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import ModelBin

_F32 = np.float32
_ONE = _F32(1.0)


@dataclass(frozen=True)
class CellKind:
    """What sets the cells apart: their gates (weight rows per hidden unit) and bias rows."""

    name: str
    #: the ``cell`` specialization constant of ``shaders/recurrent_step.comp``
    code: int
    gates: int
    bias_rows: int


RNN_CELL = CellKind("RNN", 0, 1, 1)
LSTM_CELL = CellKind("LSTM", 1, 4, 4)
GRU_CELL = CellKind("GRU", 2, 3, 4)


@dataclass(frozen=True)
class CellWeights:
    """One layer's weights, every direction stacked on the first axis."""

    xc: np.ndarray  # (dirs, gates * hidden, size)
    bias: np.ndarray  # (dirs, bias_rows, hidden)
    hc: np.ndarray  # (dirs, gates * hidden, num_output)
    hr: np.ndarray | None  # (dirs, num_output, hidden): LSTM's projection, or None


def load_weights(
    mb: ModelBin, kind: CellKind, dirs: int, size: int, hidden: int, num_output: int
) -> CellWeights:
    """Read a layer's weights in ncnn's order (each array one ``load(w, 0)``)."""

    def read(*shape: int) -> np.ndarray:
        count = int(np.prod(shape))
        return np.asarray(mb.load(count, 0), _F32).reshape(shape)

    rows = kind.gates * hidden
    xc = read(dirs, rows, size)
    bias = read(dirs, kind.bias_rows, hidden)
    hc = read(dirs, rows, num_output)
    hr = read(dirs, num_output, hidden) if hidden != num_output else None
    return CellWeights(xc, bias, hc, hr)


def sigmoid(v: np.ndarray) -> np.ndarray:
    """ncnn's ``1.f / (1.f + expf(-v))``, in float32."""
    with np.errstate(over="ignore"):
        return np.asarray(_ONE / (_ONE + np.exp(-v)), _F32)


def run_direction(
    kind: CellKind,
    w: CellWeights,
    d: int,
    x: np.ndarray,
    reverse: bool,
    h: np.ndarray,
    c: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Direction ``d`` over the (T, size) input ``x`` from states ``h`` (num_output) and ``c``
    (hidden; LSTM only): its (T, num_output) outputs and the final ``h`` and ``c``."""
    xc, bias, hc = w.xc[d], w.bias[d], w.hc[d]
    hidden = bias.shape[1]
    # ncnn adds bias, then the x terms, then the h terms, in float32
    from_x = x @ xc.T  # (T, gates * hidden)
    out = np.zeros((x.shape[0], hc.shape[1]), _F32)
    h = np.asarray(h, _F32).reshape(-1).copy()
    c = np.asarray(c, _F32).reshape(-1).copy()
    steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    for ti in steps:
        if kind is GRU_CELL:
            from_h = hc @ h
            r_u = bias[0:2].reshape(-1) + from_x[ti, : 2 * hidden] + from_h[: 2 * hidden]
            r, u = np.split(sigmoid(r_u), 2)
            n = bias[2] + r * (bias[3] + from_h[2 * hidden :]) + from_x[ti, 2 * hidden :]
            h = (_ONE - u) * np.tanh(n) + u * h
        elif kind is LSTM_CELL:
            gates = bias.reshape(-1) + from_x[ti] + hc @ h
            i, f, o = np.split(sigmoid(gates[: 3 * hidden]), 3)
            g = np.tanh(gates[3 * hidden :])
            c = f * c + i * g
            h = o * np.tanh(c)
            if w.hr is not None:
                h = w.hr[d] @ h
        else:
            h = np.tanh(bias[0] + from_x[ti] + hc @ h)
        h = np.asarray(h, _F32)
        out[ti] = h
    return out, h, np.asarray(c, _F32)
