"""The .param and .bin parsers: every syntax form, and every malformed case named precisely."""

from __future__ import annotations

import io
import random
import struct

import numpy as np
import pytest

from asyncvk import ModelFormatError
from asyncvk.net._modelbin import TAG_FP16, TAG_INT8, ModelBinReader
from asyncvk.net._param_parser import parse_param

GOOD = """7767517
6 7
Input            in0      0 1 in0 0=8 1=8 2=3
Convolution      conv_0   1 1 in0 1 0=16 1=3 11=3 2=1 12=1 3=1 13=1 4=1 14=1 15=1 16=1 5=1 6=432 9=1
Split            split_0  1 2 1 2 3
Pooling          pool_0   1 1 2 4 0=0 1=2 2=2 -23310=2,1.5e0,-2
ReLU             relu_0   1 1 3 5 0=0.1
BinaryOp         add_0    2 1 4 5 out0 0=0 3=1.0,2.5,3 30=3,4,4,16 31=16 7=abc
"""


def test_parses_every_value_form() -> None:
    pf = parse_param(GOOD.encode())
    assert [decl.type for decl in pf.layers] == [
        "Input",
        "Convolution",
        "Split",
        "Pooling",
        "ReLU",
        "BinaryOp",
    ]
    conv = pf.layers[1]
    assert conv.params.get_int(0, 0) == 16 and conv.params.get_int(9, 0) == 1
    assert conv.line == 4 and conv.bottoms == ("in0",) and conv.tops == ("1",)
    pool = pf.layers[3]
    assert pool.params[10] == (1.5, -2.0)  # old array syntax, typed float
    relu = pf.layers[4]
    assert isinstance(relu.params[0], float) and relu.params.get_float(0, 0.0) == 0.1
    add = pf.layers[5]
    assert add.params[3] == (1.0, 2.5, 3.0)
    assert add.params[30] == (3, 4, 4, 16) and add.params[31] == 16
    assert add.params[7] == "abc"
    assert pf.input_names == ("in0",)
    assert pf.output_names == ("out0",)
    assert len(pf.blob_names) == 7


def test_sources_path_bytes_and_file_objects(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "m.param"
    path.write_text(GOOD)
    assert parse_param(path).source == str(path)
    assert len(parse_param(str(path)).layers) == 6
    assert len(parse_param(io.BytesIO(GOOD.encode())).layers) == 6
    assert len(parse_param(io.StringIO(GOOD)).layers) == 6


def _bad(text: str, needle: str, line: int | None = None, layer: str | None = None) -> None:
    with pytest.raises(ModelFormatError) as info:
        parse_param(
            text.encode(),
            known_types={"Input", "Convolution", "Split", "Pooling", "ReLU", "BinaryOp"},
        )
    assert needle in str(info.value), str(info.value)
    if line is not None:
        assert info.value.line == line, str(info.value)
    if layer is not None:
        assert info.value.layer == layer


def _replace(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


@pytest.mark.parametrize(
    ("text", "needle", "line", "layer"),
    [
        ("", "empty", None, None),
        ("7767518\n1 1\nInput in0 0 1 in0\n", "bad magic", 1, None),
        ("7767517\n", "count line", 2, None),
        ("7767517\n1\nInput in0 0 1 in0\n", "layer_count blob_count", 2, None),
        ("7767517\n0 1\n", "positive", 2, None),
        ("7767517\nx 1\nInput in0 0 1 in0\n", "not a number", 2, None),
        (GOOD.replace("6 7", "7 7"), "declares 7 layers but has 6", 2, None),
        (GOOD.replace("6 7", "6 9"), "declares 9 blobs", 2, None),
        (_replace("2 1 4 5 out0", "2 1 4 nope out0"), "'nope' is not produced", 8, "add_0"),
        (_replace("relu_0   1 1 3 5", "relu_0   1 1 3 4"), "produced twice", 7, "relu_0"),
        (_replace("relu_0", "pool_0"), "duplicate layer name", 7, "pool_0"),
        (
            _replace("ReLU             relu_0", "Frobnicate relu_0"),
            "unknown layer type",
            7,
            "relu_0",
        ),
        (_replace("0=0.1", "0=1.2.3"), "not a number", 7, "relu_0"),
        (_replace("0=0.1", "40=1"), "out of range", 7, "relu_0"),
        (_replace("0=0.1", "x=1"), "not an integer", 7, "relu_0"),
        (_replace("0=0.1", "0=1 0=2"), "given twice", 7, "relu_0"),
        (_replace("0=0.1", "0"), "expected id=value", 7, "relu_0"),
        (_replace("-23310=2,1.5e0,-2", "-23310=3,1.5e0,-2"), "declares 3 values", 6, "pool_0"),
        (_replace("7=abc", "7=" + "a" * 300), "longer than", 8, "add_0"),
        (_replace("relu_0   1 1 3 5", "relu_0   x 1 3 5"), "not integers", 7, "relu_0"),
        (_replace("relu_0   1 1 3 5", "relu_0   -1 1 3 5"), "negative", 7, "relu_0"),
        (_replace("relu_0   1 1 3 5 0=0.1", "relu_0   1 3 3 5"), "ends early", 7, "relu_0"),
        (_replace("relu_0   1 1 3 5 0=0.1", "relu_0   1"), "Type Name", 7, "relu_0"),
    ],
)
def test_malformed_param_files(text: str, needle: str, line: int | None, layer: str | None) -> None:
    _bad(text, needle, line, layer)


def test_binary_garbage_is_a_format_error() -> None:
    with pytest.raises(ModelFormatError, match="not a text"):
        parse_param(b"\xff\xfe\x00binary")


def test_random_mutations_only_raise_model_format_error() -> None:
    rng = random.Random(7767517)
    data = GOOD.encode()
    for _ in range(300):
        b = bytearray(data)
        for _ in range(rng.randint(1, 6)):
            b[rng.randrange(len(b))] = rng.choice(b"0123456789 =,.-\nabcXYZ\xff")
        try:
            parse_param(bytes(b))
        except ModelFormatError:
            pass


class TestModelBin:
    def test_raw_tagged_fp16_and_codebook(self) -> None:
        values = np.arange(5, dtype=np.float32)
        data = (
            struct.pack("<I", 0)
            + values.tobytes()  # type 0, tag 0: raw fp32
            + values.tobytes()  # type 1: raw fp32, no tag
            + struct.pack("<I", TAG_FP16)
            + values.astype("<f2").tobytes()
            + b"\0\0"  # aligned
            + struct.pack("<I", 0x01020304)
            + np.linspace(0, 1, 256, dtype="<f4").tobytes()
            + bytes([0, 255, 128, 1, 2])
            + b"\0\0\0"
        )
        mb = ModelBinReader(data)
        np.testing.assert_array_equal(mb.load(5, 0), values)
        np.testing.assert_array_equal(mb.load(5, 1), values)
        np.testing.assert_array_equal(mb.load(5, 0), values)
        cb = mb.load(5, 0)
        assert cb[1] == 1.0 and cb[0] == 0.0
        mb.check_end()

    def test_truncated_names_layer_and_offset(self) -> None:
        mb = ModelBinReader(b"\0" * 10, "w.bin")
        mb.current_layer = "conv_3"
        with pytest.raises(ModelFormatError) as info:
            mb.load(4, 1)
        assert info.value.layer == "conv_3" and "16 bytes at offset 0" in str(info.value)
        assert "w.bin" in str(info.value)

    def test_int8_rejected_clearly(self) -> None:
        mb = ModelBinReader(struct.pack("<I", TAG_INT8) + b"\0" * 8)
        with pytest.raises(ModelFormatError, match="int8"):
            mb.load(8, 0)

    def test_trailing_weights(self) -> None:
        mb = ModelBinReader(b"\0" * 12)
        mb.load(2, 1)
        with pytest.raises(ModelFormatError, match="trailing weights: 4 bytes"):
            mb.check_end()
