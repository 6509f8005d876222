"""Random weights for a ``.param`` that has none, as ncnn's benchncnn benchmarks its models.

ncnn ships its benchmark models as ``.param`` files alone. The ``.bin`` made here has exactly
the layout ncnn reads: each layer's own ``load_model`` asks for its weights, in file order, and
every read is answered with seeded values and written as ncnn stores it (``load(w, 0)``: a
4-byte zero tag, then ``w`` float32; ``load(w, 1)``: ``w`` float32). The same seed gives the
same bytes on every machine.

The values keep activations in range so that a benchmark times finite numbers: a weight read
by a layer with ``num_output`` is uniform with He's bound ``sqrt(6 / fan_in)``, BatchNorm's
variances lie in [0.5, 1.5) and its slopes near 1, and every other read is small.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ._graph import build_graph
from ._param_parser import parse_param

#: BatchNorm reads slope, mean, variance and bias, each ``channels`` long: their ranges.
_BATCHNORM = ((0.75, 1.25), (-0.1, 0.1), (0.5, 1.5), (-0.1, 0.1))
#: Any other read that is not a weight matrix: biases, shifts, constants, slopes.
_SMALL = (-0.1, 0.1)


class RandomWeights:
    """A stand-in for :class:`~asyncvk.net._modelbin.ModelBinReader` that answers every read
    with seeded values and keeps the bytes a ``.bin`` would hold."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = np.random.default_rng(seed)
        self._chunks: list[bytes] = []
        self.current_layer: str | None = None
        self._layer_type = ""
        self._num_output = 0
        self._reads = 0

    def start_layer(self, name: str, type_name: str, num_output: int) -> None:
        """The reads that follow are this layer's."""
        self.current_layer = name
        self._layer_type = type_name
        self._num_output = num_output
        self._reads = 0

    def load(self, w: int, type: int) -> np.ndarray:
        if type not in (0, 1):
            raise ValueError(f"unknown ModelBin load type {type} (0 = tagged, 1 = raw float32)")
        low, high = self._bounds(w)
        values = (self._rng.random(w, dtype=np.float32) * np.float32(high - low)) + np.float32(low)
        if type == 0:
            self._chunks.append(bytes(4))  # tag 0: raw float32 follows
        self._chunks.append(values.astype("<f4").tobytes())
        self._reads += 1
        return values

    def load_int8_or_float(self, w: int) -> np.ndarray:
        return self.load(w, 0)  # float weights: a layer quantizes them itself, as ncnn's does

    def check_end(self) -> None:
        """Every read was answered: nothing can be left over."""

    def _bounds(self, w: int) -> tuple[float, float]:
        if self._layer_type == "BatchNorm" and self._reads < len(_BATCHNORM):
            return _BATCHNORM[self._reads]
        n = self._num_output
        if n > 0 and w > n and w % n == 0:
            half = math.sqrt(6.0 / (w // n))
            return -half, half
        return _SMALL

    def data(self) -> bytes:
        """The ``.bin`` bytes for every read so far."""
        return b"".join(self._chunks)

    @property
    def read_sizes(self) -> list[int]:
        """The size of each read a loader makes of :meth:`data`, in order (a tag is one)."""
        return [len(c) for c in self._chunks]


def random_weights(param: str | os.PathLike[str] | bytes, seed: int = 0) -> bytes:
    """The bytes of a ``.bin`` for ``param`` (a path or the file's bytes) with seeded values
    in ncnn's layout; raises ModelFormatError where the ``.param`` is malformed."""
    return fill_weights(param, seed).data()


def fill_weights(param: str | os.PathLike[str] | bytes, seed: int = 0) -> RandomWeights:
    """Every read the layers of ``param`` make, answered (see :func:`random_weights`)."""
    graph = build_graph(parse_param(param))
    weights = RandomWeights(seed)
    for node in graph.nodes:
        layer = node.layer
        num_output = getattr(layer, "num_output", 0)
        weights.start_layer(layer.name, layer.type_name, num_output if num_output > 0 else 0)
        try:
            layer.load_model(weights)
        except Exception as exc:
            raise graph.layer_error(node, exc) from exc
    return weights
