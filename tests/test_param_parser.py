"""The text .param parser: every syntax form ncnn accepts, and every malformed case named by
file, line and layer."""

from __future__ import annotations

import dataclasses
import io
import logging
import random
from pathlib import Path

import pytest

from asyncvk import ModelFormatError
from asyncvk.layers._paramdict import ParamValue
from asyncvk.net._param_parser import LayerDecl, ParamFile, parse_param, parse_param_text

# A small classifier exactly as pnnx writes it (line numbers matter to the tests below).
NET = """7767517
6 6
Input                    in0                      0 1 in0 0=32 1=32 2=3
Convolution              conv_0                   1 1 in0 1 0=16 1=3 11=3 2=1 12=1 3=1 13=1 4=1 14=1 15=1 16=1 5=1 6=432 9=1
ReLU                     relu_0                   1 1 1 2 0=1.000000e-01
Pooling                  maxpool2d_0              1 1 2 3 0=0 1=2 11=2 2=2 12=2 3=0 13=0 14=0 15=0 5=1
InnerProduct             linear_0                 1 1 3 4 0=10 1=1 2=40960
Softmax                  softmax_0                1 1 4 out0 0=0 1=1
"""  # noqa: E501
KNOWN = frozenset({"Input", "Convolution", "ReLU", "Pooling", "InnerProduct", "Softmax"})


def _net(old: str, new: str) -> str:
    """NET with one edit; the edit must apply, so a typo in a test cannot pass silently."""
    assert old in NET, old
    return NET.replace(old, new, 1)


def _one(params: str) -> dict[int, ParamValue]:
    """The params of a one-layer file whose only layer line ends with ``params``."""
    decl = parse_param_text(f"7767517\n1 1\nInput in0 0 1 in0 {params}\n", "one.param").layers[0]
    return dict(decl.params)


class TestWellFormed:
    def test_parses_a_pnnx_network(self) -> None:
        pf = parse_param(NET.encode(), known_types=KNOWN)
        assert isinstance(pf, ParamFile) and pf.source == "<bytes>"
        assert [(d.type, d.name, d.line) for d in pf.layers] == [
            ("Input", "in0", 3),
            ("Convolution", "conv_0", 4),
            ("ReLU", "relu_0", 5),
            ("Pooling", "maxpool2d_0", 6),
            ("InnerProduct", "linear_0", 7),
            ("Softmax", "softmax_0", 8),
        ]
        conv = pf.layers[1]
        assert conv.bottoms == ("in0",) and conv.tops == ("1",)
        assert dict(conv.params) == {
            0: 16, 1: 3, 11: 3, 2: 1, 12: 1, 3: 1, 13: 1, 4: 1, 14: 1, 15: 1, 16: 1,
            5: 1, 6: 432, 9: 1,
        }  # fmt: skip
        assert all(type(v) is int for v in conv.params.values())
        relu = pf.layers[2].params[0]
        assert type(relu) is float and relu == pytest.approx(0.1)
        assert pf.layers[4].params.get_int(2, 0) == 40960
        assert pf.blob_names == ("in0", "1", "2", "3", "4", "out0")
        assert pf.input_names == ("in0",)
        assert pf.output_names == ("out0",)

    def test_blob_order_and_outputs_with_branches(self) -> None:
        text = (
            "7767517\n4 5\n"
            "Input in 0 1 data\n"
            "Split splitncnn_0 1 2 data a b\n"
            "ReLU r 1 1 a c\n"
            "BinaryOp add 2 1 c b sum 0=0\n"
        )
        pf = parse_param_text(text, "branch.param")
        assert pf.blob_names == ("data", "a", "b", "c", "sum")
        assert pf.layers[3].bottoms == ("c", "b")
        assert pf.input_names == ("data",) and pf.output_names == ("sum",)

    def test_a_layer_may_feed_the_same_blob_twice_and_have_no_outputs(self) -> None:
        pf = parse_param_text(
            "7767517\n3 2\nInput i 0 1 x\nBinaryOp m 2 1 x x y\nNoop n 1 0 y\n", "s"
        )
        assert pf.layers[1].bottoms == ("x", "x") and pf.layers[2].tops == ()
        assert pf.output_names == ()

    @pytest.mark.parametrize(
        ("params", "expected"),
        [
            ("0=5", 5),
            ("0=-5", -5),
            ("0=+5", 5),
            ("0=-233", -233),
            ("0=2147483647", 2147483647),
            ("0=-2147483648", -2147483648),
            ("0=1.5", 1.5),
            ("0=-0.25", -0.25),
            ("0=.5", 0.5),
            ("0=5.", 5.0),
            ("0=1e-3", 1e-3),  # an 'e' alone makes a float
            ("0=1E2", 100.0),
            ("0=1.000000e-01", 0.1),
            ("0=-2.5E+03", -2500.0),
            ("0=abc", "abc"),
            ("0=Tanh", "Tanh"),
            ("0=a,b", "a,b"),  # a string keeps its commas, as in ncnn
            ("0=x+y*2", "x+y*2"),
            ('0="abc"', "abc"),
            ('0="a b,c d"', "a b,c d"),  # quoted strings may hold spaces
            ('0=""', ""),
            ("0=" + "s" * 255, "s" * 255),
            ("0=1,2,3", (1, 2, 3)),
            ("0=-233,-233", (-233, -233)),
            ("0=1.0,2.5", (1.0, 2.5)),
            ("0=1,2.5,3", (1.0, 2.5, 3.0)),  # any float element makes a float array
            ("0=1e1,2", (10.0, 2.0)),
            ("0=1,2,", (1, 2)),  # ncnn stops at a trailing comma
            ("-23300=3,1,2,3", (1, 2, 3)),
            ("-23300=2,2.0,3.0", (2.0, 3.0)),
            ("-23300=1,0.1", (0.1,)),
            ("-23300=2,1,1.5", (1.0, 1.5)),
            ("-23300=0", ()),
        ],
    )
    def test_value_forms(self, params: str, expected: ParamValue) -> None:
        value = _one(params)[0]
        assert value == expected
        assert type(value) is type(expected)
        if isinstance(value, tuple):
            assert isinstance(expected, tuple)
            assert [type(v) for v in value] == [type(v) for v in expected]

    def test_old_array_key_maps_to_its_id(self) -> None:
        values = _one("-23303=2,2.0,3.0 -23310=1,0.1 -23329=3,1,2,3 5=1")
        assert values == {3: (2.0, 3.0), 10: (0.1,), 29: (1, 2, 3), 5: 1}

    def test_every_id_from_0_to_31(self) -> None:
        params = " ".join(f"{i}={i}" for i in range(31)) + " 31=16"
        values = _one(params)
        assert sorted(values) == list(range(32))
        assert values[29] == 29 and values[31] == 16

    def test_reserved_ids_shape_hints_and_featmask(self) -> None:
        values = _one("30=3,4,4,16,3,2,2,8 31=16")
        assert values[30] == (3, 4, 4, 16, 3, 2, 2, 8)
        assert values[31] == 16
        assert _one("30=5")[30] == (5,)  # one hint value is still an array
        assert _one("-23330=4,3,4,4,16")[30] == (3, 4, 4, 16)

    def test_whitespace_blank_lines_and_line_endings(self) -> None:
        text = (
            "\ufeff\n7767517  \r\n\r\n  2   2\r\n\n"
            "Input\tin0\t0 1 in0   \r\n"
            "   \t \n"
            "ReLU relu 1 1 in0 out  0=0.5\t \n\n\n"
        )
        pf = parse_param_text(text, "ws.param")
        assert [(d.name, d.line) for d in pf.layers] == [("in0", 6), ("relu", 8)]
        assert pf.layers[1].params[0] == 0.5 and pf.layers[1].tops == ("out",)

    def test_names_keep_unicode_and_punctuation(self) -> None:
        pf = parse_param("7767517\n1 1\nInput entrée/0 0 1 blob:0.1\n".encode())
        assert pf.layers[0].name == "entrée/0" and pf.blob_names == ("blob:0.1",)

    def test_unknown_types_pass_without_known_types(self) -> None:
        pf = parse_param_text("7767517\n1 1\nMyCustomOp x 0 1 y 0=1\n", "custom.param")
        assert pf.layers[0].type == "MyCustomOp"

    def test_results_are_frozen(self) -> None:
        pf = parse_param(NET.encode())
        with pytest.raises(dataclasses.FrozenInstanceError):
            pf.layers[0].name = "x"  # type: ignore[misc]
        assert isinstance(pf.layers, tuple) and isinstance(pf.layers[0], LayerDecl)


class TestSources:
    def test_path_str_pathlike_bytes_and_file_objects(self, tmp_path: Path) -> None:
        path = tmp_path / "m.param"
        path.write_text(NET)
        assert parse_param(path).source == str(path)
        assert parse_param(str(path)).source == str(path)
        assert len(parse_param(bytearray(NET.encode())).layers) == 6
        assert parse_param(io.BytesIO(NET.encode())).source == "<bytes>"
        assert len(parse_param(io.StringIO(NET)).layers) == 6
        with path.open("rb") as f:
            assert parse_param(f).source == str(path)
        with path.open(encoding="utf-8") as t:
            assert parse_param(t).layers[-1].name == "softmax_0"

    def test_errors_name_the_path(self, tmp_path: Path) -> None:
        path = tmp_path / "bad.param"
        path.write_text(_relu("relu_0 1 1 3 2"))  # blob 3 is produced later
        with pytest.raises(ModelFormatError) as info:
            parse_param(path)
        assert info.value.file == str(path) and f"{path}:5" in str(info.value)

    def test_unreadable_sources(self, tmp_path: Path) -> None:
        missing = tmp_path / "missing.param"
        with pytest.raises(FileNotFoundError) as info:  # an OSError, as open() raises it
            parse_param(missing)
        assert info.value.filename == str(missing) and str(missing) in str(info.value)
        with pytest.raises(IsADirectoryError):
            parse_param(tmp_path)
        with pytest.raises(ModelFormatError, match="pass bytes"):
            parse_param(NET)  # content passed as a str is a (bad) path
        f = (tmp_path / "closed.param").open("w+b")
        f.close()
        with pytest.raises(ModelFormatError, match="cannot read"):
            parse_param(f)
        with pytest.raises(ModelFormatError, match=r"cannot read a \.param from int"):
            parse_param(42)  # type: ignore[arg-type]

    def test_binary_input_is_a_format_error(self) -> None:
        with pytest.raises(ModelFormatError, match=r"binary \.param\.bin"):
            parse_param((7767517).to_bytes(4, "little") + b"\x01\x00\x00\x00")
        with pytest.raises(ModelFormatError, match="not UTF-8") as info:
            parse_param(b"7767517\n1 1\nInput \xff 0 1 a\n")
        assert info.value.line == 3
        with pytest.raises(ModelFormatError, match="NUL") as info:
            parse_param(b"7767517\n1 1\nInput a\x00 0 1 a\n")
        assert info.value.line == 3


class TestDeclaredCounts:
    """ncnn reads exactly the declared number of layers; asyncvk does too, and says so."""

    def test_lines_past_the_declared_count_are_ignored_with_a_warning(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        # Not parsed at all, as in ncnn: unknown type, unknown blobs, bad params.
        extra = "Noop Output 6 1 a b c d e f output 0=x=y\nmore garbage\n"
        with caplog.at_level(logging.WARNING, logger="asyncvk.net"):
            pf = parse_param_text(NET + extra, "model.param", known_types=KNOWN)
        assert [d.name for d in pf.layers][-1] == "softmax_0" and len(pf.layers) == 6
        assert pf.output_names == ("out0",)
        [record] = caplog.records
        assert record.name == "asyncvk.net" and record.levelno == logging.WARNING
        message = record.getMessage()
        assert message.startswith("model.param:9: ignoring 2 layer lines"), message
        assert "declared on line 2" in message and "'Noop Output 6 1" in message

    def test_a_smaller_declared_count_cuts_the_layers_there(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.WARNING, logger="asyncvk.net"):
            pf = parse_param_text(_net("6 6", "5 5"), "model.param", known_types=KNOWN)
        assert [d.name for d in pf.layers][-1] == "linear_0"
        assert [r.getMessage()[:36] for r in caplog.records] == [
            "model.param:8: ignoring 1 layer line"
        ]

    def test_no_warning_when_the_counts_match(self, caplog: pytest.LogCaptureFixture) -> None:
        with caplog.at_level(logging.DEBUG, logger="asyncvk.net"):
            parse_param_text(NET, "model.param", known_types=KNOWN)
        assert caplog.records == []

    def test_fewer_blobs_than_declared_is_accepted_with_a_warning(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.WARNING, logger="asyncvk.net"):
            pf = parse_param_text(_net("6 6", "6 9"), "model.param", known_types=KNOWN)
        assert len(pf.blob_names) == 6
        [record] = caplog.records
        assert record.getMessage().startswith("model.param:2: declares 9 blobs but the layers")

    def test_nanodet_m_ending_with_an_undeclared_noop_parses(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """The shape of ncnn's benchmark/nanodet_m.param: 179 layers declared, a 180th
        ``Noop Output`` gathering the six heads after them."""
        heads = [f"head{i}" for i in range(6)]
        lines = ["7767517", "7 7", "Input in0 0 1 in0 0=8 1=8 2=3"]
        lines += [f"ReLU r{i} 1 1 in0 {h}" for i, h in enumerate(heads)]
        lines.append(f"Noop Output 6 1 {' '.join(heads)} output")
        with caplog.at_level(logging.WARNING, logger="asyncvk.net"):
            pf = parse_param_text("\n".join(lines) + "\n", "nanodet.param", known_types=KNOWN)
        assert pf.output_names == tuple(heads)
        assert "nanodet.param:10: ignoring 1 layer line" in caplog.text


def test_every_unsupported_type_is_named_at_once_with_its_lines() -> None:
    text = (
        _net("ReLU     ", "LRN      ")
        .replace("Pooling  ", "PriorBox ", 1)
        .replace("Softmax  ", "LRN      ", 1)
    )
    with pytest.raises(ModelFormatError) as info:
        parse_param_text(text, "model.param", known_types=KNOWN)
    err = info.value
    assert str(err) == "model.param: unsupported layer types: LRN (lines 5, 8), PriorBox (line 6)"
    assert (err.file, err.line, err.layer) == ("model.param", None, None)


def test_other_errors_come_first_and_unknown_types_in_ignored_lines_do_not_count() -> None:
    broken = _net("ReLU     ", "LRN      ").replace("1 1 4 out0", "1 1 nope out0")
    with pytest.raises(ModelFormatError, match="unknown blob 'nope'"):
        parse_param_text(broken, "model.param", known_types=KNOWN)
    pf = parse_param_text(NET + "LRN extra 1 1 out0 x\n", "model.param", known_types=KNOWN)
    assert len(pf.layers) == 6


RELU = "relu_0                   1 1 1 2 0=1.000000e-01"


def test_a_layer_name_may_repeat_as_in_ncnn() -> None:
    """pnnx names the Split of a constant blob ``splitncnn_0`` again; ncnn loads such a file,
    and so does asyncvk: layers are told apart by their place, blobs stay unique."""
    pf = parse_param_text(_relu("conv_0 1 1 1 2"), "model.param", known_types=KNOWN)
    assert [d.name for d in pf.layers].count("conv_0") == 2
    assert len(set(pf.blob_names)) == len(pf.blob_names)


def _relu(line: str) -> str:
    """NET with the ReLU layer line (after its type) replaced."""
    return _net(RELU, line)


def _p(params: str) -> str:
    """NET with the ReLU layer's params replaced."""
    return _relu(f"relu_0 1 1 1 2 {params}")


A256 = "a" * 256

# fmt: off
MALFORMED = [
    # (text, words in the message, line, layer)
    ("", "empty", None, None),
    ("\n \n\t\n", "empty", None, None),
    ("7767518\n1 1\nInput in0 0 1 in0\n", "bad magic", 1, None),
    ("7767517 1\n1 1\nInput in0 0 1 in0\n", "bad magic", 1, None),
    ("\n\nhello\n", "bad magic", 3, None),
    ("7767517\n", "missing the 'layer_count blob_count' line", 2, None),
    ("7767517\n1\nInput in0 0 1 in0\n", "bad counts line", 2, None),
    ("7767517\n1 1 1\nInput in0 0 1 in0\n", "bad counts line", 2, None),
    ("7767517\nx 1\nInput in0 0 1 in0\n", "bad counts line", 2, None),
    ("7767517\n1.0 1\nInput in0 0 1 in0\n", "bad counts line", 2, None),
    ("7767517\n0 1\n", "must be positive", 2, None),
    ("7767517\n1 0\nInput in0 0 1 in0\n", "must be positive", 2, None),
    ("7767517\n-1 1\n", "must be positive", 2, None),
    (_net("6 6", "7 6"), "declares 7 layers but has only 6", 2, None),
    (_net("6 6", "6 5"), "declares 5 blobs (line 2) but the layers produce 6", 8, "softmax_0"),
    (_net("6 6", "6 1"), "blob '1' is number 2", 4, "conv_0"),
    (_net("1 1 4 out0", "1 1 nope out0"), "unknown blob 'nope'", 8, "softmax_0"),
    (_relu("relu_0 1 1 3 2"), "unknown blob '3'", 5, "relu_0"),  # produced later
    (_relu("relu_0 1 1 1 1"), "twice (first by layer 'conv_0' on line 4)", 5, "relu_0"),
    (_net("1 1 2 3 0=0", "1 2 2 3 3 0=0"), "blob '3' is produced twice", 6, "maxpool2d_0"),
    (_net("ReLU     ", "Frobnicate "), "unsupported layer type: Frobnicate (line 5)", 5, "relu_0"),
    (_net("ReLU     ", "Relu     "), "type: Relu (line 5; did you mean 'ReLU'?)", 5, "relu_0"),
    (_relu("relu_0 1 1 1"), "missing blob names", 5, "relu_0"),
    (_relu("relu_0 1 1 1 0=1"), "found param '0=1' after 1 of them", 5, "relu_0"),
    (_net("1 1 3 4 0=10", "2 1 3 0=10"), "expects 2 input and 1 output", 7, "linear_0"),
    (_relu("relu_0 1"), "expected 'Type Name in_count out_count", 5, "relu_0"),
    (_net("ReLU                     " + RELU, "ReLU"), "expected 'Type Name", 5, None),
    (_relu("relu_0 x 1 1 2"), "input count 'x' is not an integer", 5, "relu_0"),
    (_relu("relu_0 1 1.0 1 2"), "output count '1.0' is not an integer", 5, "relu_0"),
    (_relu("relu_0 -1 1 1 2"), "input count -1 is negative", 5, "relu_0"),
    (_relu(f"{A256} 1 1 1 2"), "layer name longer than 255", 5, A256),
    (_relu(f"relu_0 1 1 1 {A256}"), "blob name longer than 255", 5, "relu_0"),
    (_p("0=1.2.3"), "param 0: '1.2.3' is not a number", 5, "relu_0"),
    (_p("0=12abc"), "param 0: '12abc' is not a number", 5, "relu_0"),
    (_p("0=1_000"), "is not a number", 5, "relu_0"),
    (_p("0=1e"), "'1e' is not a number", 5, "relu_0"),
    (_p("0=-inf"), "'-inf' is not a number", 5, "relu_0"),
    (_p("0=1,x"), "'x' is not a number", 5, "relu_0"),
    (_p("0=1,,2"), "'' is not a number", 5, "relu_0"),
    (_p("0=,1"), "'' is not a number", 5, "relu_0"),
    (_p("0=é"), "'é' is not a number", 5, "relu_0"),
    (_p("0=99999999999"), "does not fit in a 32-bit int", 5, "relu_0"),
    (_p("0=" + "9" * 5000), "does not fit in a 32-bit int", 5, "relu_0"),  # int() would refuse
    (_relu("relu_0 1 " + "9" * 5000 + " 1 2"), "missing blob names", 5, "relu_0"),
    (_p("0="), "param 0 has no value", 5, "relu_0"),
    (_p("32=1"), "param id 32 out of range 0..31", 5, "relu_0"),
    (_p("-1=1"), "param id -1 out of range", 5, "relu_0"),
    (_p("-23332=1,1"), "param id 32 (written -23332) out of range", 5, "relu_0"),
    (_p("x=1"), "malformed param key 'x'", 5, "relu_0"),
    (_p("=1"), "malformed param key ''", 5, "relu_0"),
    (_p("1.5=2"), "malformed param key '1.5'", 5, "relu_0"),
    (_p("0x1=2"), "malformed param key '0x1'", 5, "relu_0"),
    (_p("5"), "expected id=value, got '5'", 5, "relu_0"),
    (_p("0=1 0=2"), "param 0 given twice", 5, "relu_0"),
    (_p("3=1 -23303=1,1"), "param 3 given twice", 5, "relu_0"),
    (_p("-23303=3,1,2"), "declares 3 values but has 2", 5, "relu_0"),
    (_p("-23303=1,1,2"), "declares 1 values but has 2", 5, "relu_0"),
    (_p("-23303=x,1"), "must start with its length, got 'x'", 5, "relu_0"),
    (_p("-23303=1.0,2"), "must start with its length", 5, "relu_0"),
    (_p("-23303=-1"), "must start with its length", 5, "relu_0"),
    (_p("-23303="), "must start with its length", 5, "relu_0"),
    (_p('-23303="a"'), "must start with its length", 5, "relu_0"),
    (_p("-23303=2,1,y"), "'y' is not a number", 5, "relu_0"),
    (_p("7=" + A256), "param 7: string longer than 255", 5, "relu_0"),
    (_p(f'7="{A256[:250]} {A256[:10]}"'), "string longer than 255", 5, "relu_0"),
    (_p('7="abc'), "param 7: unterminated quoted string", 5, "relu_0"),
    (_p('7="a"b'), "param 7: text after the closing quote", 5, "relu_0"),
    (_p("31=1.5"), "param 31 (featmask) must be an int", 5, "relu_0"),
    (_p("31=1,2"), "param 31 (featmask) must be an int", 5, "relu_0"),
    (_p("31=all"), "param 31 (featmask) must be an int", 5, "relu_0"),
    (_p("30=1.0,2"), "param 30 (shape hints) must be an int array", 5, "relu_0"),
    (_p("30=abc"), "param 30 (shape hints) must be an int array", 5, "relu_0"),
]
# fmt: on


@pytest.mark.parametrize(
    ("text", "needle", "line", "layer"),
    MALFORMED,
    ids=[f"{i}-{case[1][:30]}" for i, case in enumerate(MALFORMED)],
)
def test_malformed_param_files(text: str, needle: str, line: int | None, layer: str | None) -> None:
    with pytest.raises(ModelFormatError) as info:
        parse_param_text(text, "model.param", known_types=KNOWN)
    err = info.value
    message = str(err)
    assert needle in err.detail, message
    assert err.file == "model.param"
    assert err.line == line, message
    assert err.layer == layer, message
    assert message.startswith("model.param" if line is None else f"model.param:{line}")
    if layer is not None:
        assert f"layer {layer!r}" in message


def test_random_mutations_only_raise_model_format_error() -> None:
    """Whatever bytes come in, the parser either parses or raises ModelFormatError."""
    rng = random.Random(7767517)
    data = NET.encode()
    alphabet = b'0123456789 =,.-+e"\n\t\rabcXYZ\xff\x00'
    outcomes = {"parsed": 0, "rejected": 0}
    for _ in range(300):
        b = bytearray(data)
        for _ in range(rng.randint(1, 6)):
            pos = rng.randrange(len(b))
            match rng.randrange(4):
                case 0:
                    b[pos] = rng.choice(alphabet)
                case 1:
                    b.insert(pos, rng.choice(alphabet))
                case 2:
                    del b[pos]
                case _:
                    del b[pos:]
            if not b:
                break
        try:
            parse_param(bytes(b), known_types=KNOWN if rng.random() < 0.5 else None)
        except ModelFormatError as exc:
            assert exc.file == "<bytes>"
            outcomes["rejected"] += 1
        else:
            outcomes["parsed"] += 1
    assert outcomes["rejected"] > 100 and outcomes["parsed"] > 0, outcomes
