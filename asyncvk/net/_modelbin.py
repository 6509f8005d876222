"""ModelBinReader: ncnn's ``.bin`` weights, read in layer order (ncnn ``ModelBinFromDataReader``).

Every buffer is 4-byte aligned. ``type=1`` is raw float32. ``type=0`` starts with a tag:
0x01306B47 fp16, 0x000D4B38 int8 (rejected: quantized models are not supported), 0x0002C056
raw fp32 with extra scaling, 0 raw fp32, any other value a 256-float codebook + uint8 indexes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO

import numpy as np

from .._errors import ModelFormatError

TAG_FP16 = 0x01306B47
TAG_INT8 = 0x000D4B38
TAG_FP32_SCALED = 0x0002C056


def _align4(n: int) -> int:
    return (n + 3) & ~3


class ModelBinReader:
    """Reads weights from a buffer; errors name the file, the layer and the offset."""

    def __init__(self, data: bytes | memoryview, source: str = "<bytes>") -> None:
        self.data = memoryview(data).cast("B")
        self.source = source
        self.offset = 0
        self.current_layer: str | None = None

    @classmethod
    def open(cls, source: str | os.PathLike[str] | bytes | IO[bytes]) -> ModelBinReader:
        if isinstance(source, (str, os.PathLike)):
            try:
                return cls(Path(source).read_bytes(), str(source))
            except OSError as exc:
                raise ModelFormatError(
                    f"cannot read: {exc.strerror or exc}", file=str(source)
                ) from exc
        if isinstance(source, (bytes, bytearray, memoryview)):
            return cls(bytes(source))
        return cls(source.read(), str(getattr(source, "name", "<file>")))

    @property
    def remaining(self) -> int:
        return len(self.data) - self.offset

    def _take(self, n: int, what: str) -> memoryview:
        if n > self.remaining:
            raise ModelFormatError(
                f"truncated weights: {what} needs {n} bytes at offset {self.offset}, "
                f"{self.remaining} left",
                file=self.source,
                layer=self.current_layer,
            )
        chunk = self.data[self.offset : self.offset + n]
        self.offset += n
        return chunk

    def load(self, w: int, type: int) -> np.ndarray:
        """Read ``w`` values as a new float32 array."""
        if w < 0:
            raise ModelFormatError(
                f"negative weight count {w}", file=self.source, layer=self.current_layer
            )
        if type == 1:
            return np.frombuffer(self._take(w * 4, "float32 data"), "<f4").astype(np.float32)
        if type != 0:
            raise ValueError(f"unknown ModelBin load type {type}")
        tag = int(np.frombuffer(self._take(4, "weight tag"), "<u4")[0])
        if tag == TAG_FP16:
            raw = self._take(_align4(w * 2), "fp16 data")
            return np.frombuffer(raw[: w * 2], "<f2").astype(np.float32)
        if tag == TAG_INT8:
            raise ModelFormatError(
                "int8-quantized weights are not supported (convert with fp16 or fp32 weights)",
                file=self.source,
                layer=self.current_layer,
            )
        if tag in (0, TAG_FP32_SCALED):
            return np.frombuffer(self._take(w * 4, "float32 data"), "<f4").astype(np.float32)
        codebook = np.frombuffer(self._take(256 * 4, "codebook"), "<f4")
        indexes = np.frombuffer(self._take(_align4(w), "codebook indexes")[:w], np.uint8)
        return codebook[indexes].astype(np.float32)

    def check_end(self) -> None:
        if self.remaining:
            raise ModelFormatError(
                f"trailing weights: {self.remaining} bytes after the last layer",
                file=self.source,
            )


__all__ = ("ModelBinReader",)
