"""ModelBinReader: ncnn's ``.bin`` weights, read in layer order (ncnn ``ModelBinFromDataReader``).

A ``.bin`` has no index: it is the concatenation of every layer's buffers, in the order the
layers' ``load_model`` ask for them, each 4-byte aligned and little-endian. So the only way to
find a mistake is to read in order and check the sizes, and errors must say which layer was
reading, at which offset, and how many bytes it wanted.

``type=1`` is raw float32 (w * 4 bytes). ``type=0`` starts with a 4-byte tag:

- ``0x01306B47``: fp16, alignSize(w * 2, 4) bytes;
- ``0x000D4B38``: int8, alignSize(w, 4) bytes: only where the layer reads through
  ``load_int8_or_float`` (int8 Convolution / ConvolutionDepthWise / InnerProduct / Embed
  weights, given back as an int8 array as ncnn's elemsize-1 Mat); elsewhere an error, as ncnn
  would run garbage;
- ``0x0002C056``: raw fp32 "with extra scaling", w * 4 bytes;
- ``0``: raw fp32, w * 4 bytes;
- any other value: a 256-float codebook, then alignSize(w, 4) uint8 indexes into it.
"""

from __future__ import annotations

import operator
import os
from typing import IO, NoReturn

import numpy as np

from .._errors import ModelFormatError
from ._model_source import read_model_file
from ._weights_prefetch import take_early_read

TAG_FP16 = 0x01306B47
TAG_INT8 = 0x000D4B38
TAG_FP32_SCALED = 0x0002C056
CODEBOOK_SIZE = 256
#: Raw float32 runs shorter than this are copied rather than viewed: a view keeps the whole
#: file's bytes alive, which for an fp16 or int8 file (whose raw runs are only biases and
#: scales) would hold the file beside its converted weights, 1.5x the host memory.
VIEW_MIN_BYTES = 64 * 1024


def _align4(n: int) -> int:
    return (n + 3) & ~3


class ModelBinReader:
    """Reads weights from one in-memory buffer; errors name the file, the layer and the offset.

    Set ``current_layer`` before each layer's ``load_model`` so that errors name it. Raw
    float32 weights of at least ``VIEW_MIN_BYTES`` come back as read-only views of the file's
    bytes, not copies: a copy of every weight doubled the host work of a large model (vgg16's
    553 MB: about 1 s of page faults and copying on a 2-core machine). The buffer is immutable
    (a caller's writable one is copied once), so the views never change. Shorter raw runs are
    read-only copies, so that a file of converted weights (fp16, int8, codebook: fresh arrays)
    is not kept alive by its biases; one with a raw run past the bound (a 21841-class head's
    bias) still is. A layer that changes weights makes its own array.
    """

    def __init__(self, data: bytes | bytearray | memoryview, source: str = "<bytes>") -> None:
        view = memoryview(data)
        if not view.c_contiguous or not view.readonly:
            # weights are views of this buffer: a caller's buffer it may reuse is copied once
            view = memoryview(view.tobytes())
        self.data = view.cast("B")
        self.source = source
        self.offset = 0
        self.current_layer: str | None = None
        #: Whether the bytes came from a read started before the load (the CLI's).
        self.read_early = False

    @classmethod
    def open(cls, source: str | os.PathLike[str] | bytes | IO[bytes]) -> ModelBinReader:
        """Read a whole ``.bin`` from a path (or take the CLI's early read of it, when the file
        is unchanged since), its bytes, or a binary file object."""
        if isinstance(source, (bytes, bytearray, memoryview)):
            return cls(source)
        if isinstance(source, (str, os.PathLike)):
            early = take_early_read(source)
            if early is not None:
                reader = cls(early, os.fsdecode(source))
                reader.read_early = True
                return reader
        name, raw = read_model_file(source, ".bin")
        assert isinstance(raw, bytes)
        return cls(raw, name)

    @property
    def remaining(self) -> int:
        """Bytes not read yet."""
        return len(self.data) - self.offset

    def load(self, w: int, type: int) -> np.ndarray:
        """Read ``w`` values as a 1-D float32 array (ncnn ``ModelBin::load(w, type)``); raw
        float32 runs of at least ``VIEW_MIN_BYTES`` are read-only views, shorter ones
        read-only copies."""
        return self._load(w, type, int8=False)

    def load_int8_or_float(self, w: int) -> np.ndarray:
        """``load(w, 0)`` for a weight ncnn may store quantized: a new 1-D int8 array when the
        tag says int8, float32 otherwise."""
        return self._load(w, 0, int8=True)

    def _load(self, w: int, type: int, int8: bool) -> np.ndarray:
        w = operator.index(w)
        if type not in (0, 1):
            raise ValueError(f"unknown ModelBin load type {type} (0 = tagged, 1 = raw float32)")
        if w < 0:
            self._fail(f"negative weight count {w}")
        if type == 1:
            return self._floats(w, "float32 data")
        tag_offset = self.offset
        tag = int.from_bytes(self._take(4, "weight tag"), "little")
        if tag == TAG_FP16:
            raw = self._take(_align4(w * 2), f"fp16 data for {w} values")
            return np.frombuffer(raw, "<f2", count=w).astype(np.float32)
        if tag == TAG_INT8:
            if int8:
                raw = self._take(_align4(w), f"int8 data for {w} values")
                return np.frombuffer(raw, np.int8, count=w).copy()
            self.offset = tag_offset
            self._fail(
                f"int8-quantized weights (tag 0x{TAG_INT8:08x} at offset {tag_offset}) in a "
                "layer that takes no int8 weights (only Convolution, ConvolutionDepthWise and "
                "InnerProduct with param 8 int8_scale_term, and Embed with param 18, do)"
            )
        if tag in (0, TAG_FP32_SCALED):
            return self._floats(w, "float32 data")
        codebook = np.frombuffer(self._take(CODEBOOK_SIZE * 4, "codebook"), "<f4")
        indexes = np.frombuffer(self._take(_align4(w), f"{w} codebook indexes"), np.uint8, w)
        return codebook[indexes].astype(np.float32)

    def check_end(self) -> None:
        """Raise if bytes are left: the .bin does not belong to this .param."""
        if self.remaining:
            raise ModelFormatError(
                f"trailing weights: {self.remaining} bytes after the last layer "
                f"(offset {self.offset} of {len(self.data)}); the .bin does not match the .param",
                file=self.source,
            )

    def _floats(self, w: int, what: str) -> np.ndarray:
        values = np.frombuffer(self._take(w * 4, f"{what} for {w} values"), "<f4")
        if values.dtype == np.float32 and values.nbytes >= VIEW_MIN_BYTES:
            return values  # read-only: the reader's buffer is immutable
        copied = values.astype(np.float32)  # also swaps the bytes on a big-endian host
        copied.flags.writeable = False
        return copied

    def _take(self, n: int, what: str) -> memoryview:
        if n > self.remaining:
            self._fail(
                f"truncated weights: {what} wants {n} bytes at offset {self.offset}, "
                f"only {self.remaining} available"
            )
        chunk = self.data[self.offset : self.offset + n]
        self.offset += n
        return chunk

    def _fail(self, message: str) -> NoReturn:
        raise ModelFormatError(message, file=self.source, layer=self.current_layer)

    def __repr__(self) -> str:
        return f"<ModelBinReader {self.source!r} [offset {self.offset} of {len(self.data)}]>"


__all__ = ("ModelBinReader",)
