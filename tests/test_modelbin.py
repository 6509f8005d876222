"""The .bin reader: every storage form ncnn writes; truncation named by file, layer, offset."""

from __future__ import annotations

import io
import random
import struct
from pathlib import Path

import numpy as np
import pytest

from asyncvk import ModelFormatError
from asyncvk.layers import ModelBin
from asyncvk.net._modelbin import (
    TAG_FP16,
    TAG_FP32_SCALED,
    TAG_INT8,
    VIEW_MIN_BYTES,
    ModelBinReader,
)


def _tag(tag: int) -> bytes:
    return struct.pack("<I", tag)


def _f32(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


def _f16(*values: float) -> bytes:
    raw = struct.pack(f"<{len(values)}e", *values)
    return raw + b"\0" * (-len(raw) % 4)


CODEBOOK = np.linspace(-1.0, 1.0, 256, dtype=np.float32)


def _codebook(tag: int, indexes: list[int]) -> bytes:
    return (
        _tag(tag) + CODEBOOK.astype("<f4").tobytes() + bytes(indexes) + b"\0" * (-len(indexes) % 4)
    )


class TestForms:
    def test_type1_is_raw_float32_without_a_tag(self) -> None:
        mb = ModelBinReader(_f32(1.5, -2.0, 3.25))
        out = mb.load(3, 1)
        assert out.dtype == np.float32 and out.shape == (3,)
        np.testing.assert_array_equal(out, [1.5, -2.0, 3.25])
        assert mb.offset == 12 and mb.remaining == 0
        mb.check_end()

    @pytest.mark.parametrize("tag", [0, TAG_FP32_SCALED])
    def test_type0_raw_float32_tags(self, tag: int) -> None:
        mb = ModelBinReader(_tag(tag) + _f32(1.0, 2.0))
        np.testing.assert_array_equal(mb.load(2, 0), [1.0, 2.0])
        assert mb.offset == 12
        mb.check_end()

    @pytest.mark.parametrize("w", [1, 2, 3, 4, 7])
    def test_fp16_is_widened_and_padded_to_4_bytes(self, w: int) -> None:
        values = [0.5 * i - 1.0 for i in range(w)]
        mb = ModelBinReader(_tag(TAG_FP16) + _f16(*values) + _f32(9.0))
        out = mb.load(w, 0)
        assert out.dtype == np.float32 and out.shape == (w,)
        np.testing.assert_array_equal(out, values)
        assert mb.offset == 4 + (w * 2 + 3) // 4 * 4  # alignSize(w * 2, 4)
        np.testing.assert_array_equal(mb.load(1, 1), [9.0])  # the next buffer is intact

    def test_fp16_special_values(self) -> None:
        out = ModelBinReader(_tag(TAG_FP16) + _f16(float("inf"), -0.0, 65504.0, 6e-8)).load(4, 0)
        assert out[0] == np.inf and np.signbit(out[1]) and out[2] == 65504.0
        assert out[3] == pytest.approx(5.96e-8, rel=1e-2)  # a subnormal survives
        assert np.isnan(ModelBinReader(_tag(TAG_FP16) + _f16(float("nan"))).load(1, 0)[0])

    @pytest.mark.parametrize("tag", [0x00000001, 0x12345678, 0xFFFFFFFF])
    def test_any_other_tag_is_a_codebook(self, tag: int) -> None:
        indexes = [0, 255, 128, 1, 7]
        mb = ModelBinReader(_codebook(tag, indexes) + _f32(4.0))
        out = mb.load(5, 0)
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, CODEBOOK[indexes])
        assert mb.offset == 4 + 1024 + 8  # alignSize(5, 4) index bytes
        np.testing.assert_array_equal(mb.load(1, 1), [4.0])

    def test_zero_values(self) -> None:
        mb = ModelBinReader(_f32() + _tag(TAG_FP16) + _tag(0))
        assert mb.load(0, 1).shape == (0,)
        assert mb.load(0, 0).shape == (0,)
        assert mb.load(0, 0).shape == (0,)
        mb.check_end()

    def test_a_layer_sequence_reads_to_the_end(self) -> None:
        """A Convolution (fp16 weight + fp32 bias) then an InnerProduct (fp32 weight + bias)."""
        data = _tag(TAG_FP16) + _f16(1, 2, 3) + _f32(0.5) + _tag(0) + _f32(4, 5) + _f32(-1)
        mb = ModelBinReader(data, "net.bin")
        mb.current_layer = "conv_0"
        weight, bias = mb.load(3, 0), mb.load(1, 1)
        mb.current_layer = "linear_0"
        np.testing.assert_array_equal(mb.load(2, 0), [4, 5])
        np.testing.assert_array_equal(mb.load(1, 1), [-1])
        np.testing.assert_array_equal(weight, [1, 2, 3])
        assert bias[0] == 0.5 and mb.remaining == 0
        mb.check_end()

    def test_arrays_outlive_the_callers_buffer(self) -> None:
        data = bytearray(_f32(1.0, 2.0) + _tag(TAG_FP16) + _f16(3.0))
        mb = ModelBinReader(data)
        raw, half = mb.load(2, 1), mb.load(1, 0)
        data[:] = b"\xff" * len(data)  # the caller reuses its buffer
        np.testing.assert_array_equal(raw, [1.0, 2.0])
        assert half[0] == 3.0

    def test_raw_floats_are_read_only_views(self) -> None:
        """No copy of large raw float32 weights (vgg16's 553 MB), and none can be changed in
        place: the next layer's weights share the buffer."""
        n = VIEW_MIN_BYTES // 4
        data = np.arange(n, dtype="<f4").tobytes() + _f32(3.0)
        mb = ModelBinReader(data)
        raw, following = mb.load(n, 1), mb.load(1, 1)
        assert np.shares_memory(raw, np.frombuffer(data, np.uint8))
        with pytest.raises(ValueError, match="read-only"):
            raw[0] = 7.0
        assert following[0] == 3.0

    def test_converted_weights_keep_no_view_of_the_file(self) -> None:
        """An fp16 or int8 file's raw runs are biases and scales: copied, so the file's bytes
        are not held beside the converted weights (1.5x the host memory)."""
        n = VIEW_MIN_BYTES
        data = (
            _tag(TAG_FP16)
            + _f16(*[0.5] * n)
            + _f32(*[1.0] * 64)
            + _tag(TAG_INT8)
            + bytes(n)
            + _f32(*[2.0] * (VIEW_MIN_BYTES // 4 - 1))
        )
        mb = ModelBinReader(data)
        arrays = [mb.load(n, 0), mb.load(64, 1), mb.load_int8_or_float(n)]
        arrays.append(mb.load(VIEW_MIN_BYTES // 4 - 1, 1))
        mb.check_end()
        buffer = np.frombuffer(data, np.uint8)
        assert not any(np.shares_memory(a, buffer) for a in arrays)
        assert arrays[1][0] == 1.0 and arrays[3][-1] == 2.0
        with pytest.raises(ValueError, match="read-only"):
            arrays[1][0] = 7.0

    def test_little_endian_regardless_of_host(self) -> None:
        mb = ModelBinReader(b"\x00\x00\x80\x3f")  # 1.0f little-endian
        assert mb.load(1, 1)[0] == 1.0

    def test_memoryview_inputs(self) -> None:
        assert ModelBinReader(memoryview(_f32(2.0))).load(1, 1)[0] == 2.0
        strided = memoryview(b"".join(bytes([b, 0]) for b in _f32(3.0)))[::2]
        assert ModelBinReader(strided).load(1, 1)[0] == 3.0
        floats = np.array([5.0, 6.0], dtype="<f4").data
        np.testing.assert_array_equal(ModelBinReader(floats).load(2, 1), [5.0, 6.0])

    def test_satisfies_the_modelbin_protocol(self) -> None:
        mb: ModelBin = ModelBinReader(_f32(1.0))
        assert mb.load(1, 1)[0] == 1.0

    def test_repr_shows_progress(self) -> None:
        mb = ModelBinReader(_f32(1, 2), "w.bin")
        mb.load(1, 1)
        assert repr(mb) == "<ModelBinReader 'w.bin' [offset 4 of 8]>"


class TestErrors:
    @pytest.mark.parametrize(
        ("data", "w", "type", "needle"),
        [
            (b"", 1, 0, "weight tag wants 4 bytes at offset 0, only 0 available"),
            (b"\0\0", 1, 0, "weight tag wants 4 bytes at offset 0, only 2 available"),
            (_f32(1.0), 2, 1, "float32 data for 2 values wants 8 bytes at offset 0, only 4"),
            (_tag(0) + _f32(1.0), 2, 0, "wants 8 bytes at offset 4, only 4 available"),
            (_tag(TAG_FP16) + b"\0" * 6, 4, 0, "fp16 data for 4 values wants 8 bytes at offset 4"),
            (_tag(TAG_FP16) + b"\0" * 6, 3, 0, "wants 8 bytes at offset 4, only 6"),  # padding
            (_tag(7) + b"\0" * 100, 3, 0, "codebook wants 1024 bytes at offset 4, only 100"),
            (_tag(7) + b"\0" * 1027, 3, 0, "3 codebook indexes wants 4 bytes at offset 1028"),
        ],
    )
    def test_truncation_names_file_layer_offset_and_sizes(
        self, data: bytes, w: int, type: int, needle: str
    ) -> None:
        mb = ModelBinReader(data, "model.bin")
        mb.current_layer = "conv_3"
        with pytest.raises(ModelFormatError) as info:
            mb.load(w, type)
        err = info.value
        assert err.file == "model.bin" and err.layer == "conv_3"
        assert str(err).startswith("model.bin, layer 'conv_3': truncated weights: ")
        assert needle in err.detail, str(err)

    def test_truncation_after_earlier_layers_gives_the_offset(self) -> None:
        mb = ModelBinReader(_f32(1, 2, 3), "m.bin")
        mb.current_layer = "bn"
        mb.load(2, 1)
        mb.current_layer = "fc"
        with pytest.raises(ModelFormatError, match="wants 8 bytes at offset 8, only 4") as info:
            mb.load(2, 1)
        assert info.value.layer == "fc"

    def test_without_a_current_layer_the_error_names_the_file(self) -> None:
        with pytest.raises(ModelFormatError) as info:
            ModelBinReader(b"", "m.bin").load(1, 1)
        assert info.value.layer is None and str(info.value).startswith("m.bin: truncated")

    def test_int8_outside_an_int8_layer_is_rejected_clearly(self) -> None:
        mb = ModelBinReader(_f32(0.0) + _tag(TAG_INT8) + b"\0" * 8, "q.bin")
        mb.load(1, 1)
        mb.current_layer = "conv_int8"
        with pytest.raises(ModelFormatError, match="int8-quantized weights") as info:
            mb.load(8, 0)
        assert info.value.layer == "conv_int8" and info.value.file == "q.bin"
        assert "takes no int8 weights" in str(info.value) and "offset 4" in str(info.value)
        assert mb.offset == 4  # left at the tag

    def test_trailing_weights(self) -> None:
        mb = ModelBinReader(b"\0" * 12, "extra.bin")
        mb.load(2, 1)
        with pytest.raises(ModelFormatError) as info:
            mb.check_end()
        assert "trailing weights: 4 bytes after the last layer" in str(info.value)
        assert info.value.file == "extra.bin"

    def test_negative_count_is_a_format_error(self) -> None:
        mb = ModelBinReader(b"", "m.bin")
        mb.current_layer = "fc"
        with pytest.raises(ModelFormatError, match="negative weight count -4") as info:
            mb.load(-4, 1)
        assert info.value.layer == "fc"

    def test_unknown_load_type_is_a_programming_error(self) -> None:
        with pytest.raises(ValueError, match="unknown ModelBin load type 2"):
            ModelBinReader(b"\0" * 8).load(1, 2)

    def test_random_bytes_and_sizes_only_raise_model_format_error(self) -> None:
        rng = random.Random(7767517)
        tags = [_tag(t) for t in (0, TAG_FP16, TAG_INT8, TAG_FP32_SCALED, 5)]
        for _ in range(300):
            data = b"".join(
                rng.choice(tags) + rng.randbytes(rng.randrange(64)) for _ in range(rng.randrange(4))
            )
            mb = ModelBinReader(data)
            try:
                for _ in range(rng.randrange(1, 6)):
                    out = mb.load(rng.randrange(-1, 40), rng.randrange(2))
                    assert out.dtype == np.float32
                mb.check_end()
            except ModelFormatError:
                pass


class TestOpen:
    def test_path_bytes_and_file_objects(self, tmp_path: Path) -> None:
        path = tmp_path / "w.bin"
        path.write_bytes(_f32(1.0, 2.0))
        for source in (path, str(path)):
            mb = ModelBinReader.open(source)
            assert mb.source == str(path) and mb.load(2, 1)[1] == 2.0
        assert ModelBinReader.open(_f32(3.0)).source == "<bytes>"
        assert ModelBinReader.open(io.BytesIO(_f32(4.0))).load(1, 1)[0] == 4.0
        with path.open("rb") as f:
            assert ModelBinReader.open(f).source == str(path)

    def test_unreadable_sources(self, tmp_path: Path) -> None:
        missing = tmp_path / "missing.bin"
        with pytest.raises(FileNotFoundError) as info:  # an OSError, as open() raises it
            ModelBinReader.open(missing)
        assert info.value.filename == str(missing)
        with pytest.raises(IsADirectoryError):
            ModelBinReader.open(tmp_path)
        path = tmp_path / "text.bin"
        path.write_text("abcd")
        with path.open() as text, pytest.raises(ModelFormatError, match="'rb' mode"):
            ModelBinReader.open(text)  # type: ignore[arg-type]
        f = path.open("rb")
        f.close()
        with pytest.raises(ModelFormatError, match="cannot read"):
            ModelBinReader.open(f)
