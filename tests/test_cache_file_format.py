"""The cache file format: round trip, inspection, and a corruption matrix in which every damaged
file is a miss with a reason naming what was wrong. Identities are plain values (no GPU) except
in the last section, where real files of the lavapipe device go through ``PipelineCache``."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import re
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import IDENTITY
from pipeline_requests import build_one, run_scale_add

from asyncvk._version import __version__
from asyncvk.cache import PipelineCache, PipelineSpec
from asyncvk.cache import _file_format as ff
from asyncvk.cache._cache_key import local_cache_key
from asyncvk.cache._file_entries import decode_cache
from asyncvk.cache._file_format import (
    HEADER_FIELDS,
    HEADER_SIZE,
    CacheContents,
    CacheLoadResult,
    SpirvKey,
    encode_cache,
    validate_driver_blob,
)
from asyncvk.cache._file_inspect import describe_cache, read_cache_source
from asyncvk.gpu import VulkanDevice
from asyncvk.gpu._identity import DeviceIdentity


def spirv(tag: int, words: int) -> bytes:
    """A SPIR-V-shaped body: the magic word, then ``words - 1`` words of ``tag``."""
    return struct.pack("<I", ff.SPIRV_MAGIC) + struct.pack("<I", tag) * (words - 1)


def driver_blob(identity: DeviceIdentity = IDENTITY, *, tail: bytes = b"pipelines" * 7) -> bytes:
    head = struct.pack("<IIII", 32, 1, identity.vendor_id, identity.device_id)
    return head + identity.pipeline_cache_uuid + tail


RELU = SpirvKey("relu", 0x0, 0x1111, 0xAAAA)
RELU_FP16 = SpirvKey("relu", 0x18, 0x1111, 0xAAAA)
SOFTMAX = SpirvKey("softmax_reduce_max_pack4", 0x3, 0x2222, 0xAAAA)
ENTRIES = {RELU: spirv(1, 8), RELU_FP16: spirv(2, 12), SOFTMAX: spirv(3, 20)}
SOURCES = {"relu": 0x1111, "softmax_reduce_max_pack4": 0x2222}
CONTENTS = CacheContents(IDENTITY, ENTRIES, driver_blob())
DATA = encode_cache(CONTENTS)
LAYOUT = describe_cache(DATA)["layout"]


def _fields() -> dict[str, tuple[int, int]]:
    """Header field -> (offset, size), read off the struct format."""
    out: dict[str, tuple[int, int]] = {}
    offset = 0
    codes = re.findall(r"\d*[a-zA-Z]", ff._HEADER.format.lstrip("<"))
    for name, code in zip(HEADER_FIELDS, codes, strict=True):
        size = struct.calcsize("<" + code)
        out[name] = (offset, size)
        offset += size
    assert offset == HEADER_SIZE
    return out


FIELDS = _fields()


def _bodies() -> list[tuple[SpirvKey, int, int]]:
    """(key, start, end) of each SPIR-V body in DATA, in file order."""
    start = LAYOUT["spirv_bodies"][0]
    out = []
    for entry in describe_cache(DATA)["spirv_entries"]:
        key = SpirvKey(
            entry["shader"],
            entry["option_bits"],
            int(entry["source_hash"], 16),
            int(entry["macro_hash"], 16),
        )
        out.append((key, start, start + entry["size"]))
        start += entry["size"]
    return out


BODIES = _bodies()


def _patch(data: bytes, field: str, value: int | bytes, *, reseal: bool = True) -> bytes:
    """Set one header field; with ``reseal`` the header's MAC is recomputed with this user's
    cache key, so the field's own check, not the MAC, has to catch it."""
    out = bytearray(data)
    start, size = FIELDS[field]
    out[start : start + size] = (
        value if isinstance(value, bytes) else value.to_bytes(size, "little")
    )
    if reseal:
        hstart, hsize = FIELDS["header_hash"]
        out[hstart : hstart + hsize] = local_cache_key().mac(bytes(out[:hstart]))
    return bytes(out)


def _flip(data: bytes, offset: int, bit: int = 0) -> bytes:
    out = bytearray(data)
    out[offset] ^= 1 << bit
    return bytes(out)


def _decode(
    data: bytes, expected: DeviceIdentity | None = IDENTITY, sources: dict[str, int] | None = None
) -> tuple[CacheLoadResult, CacheContents | None]:
    return decode_cache(
        data, expected=expected, source_hashes=SOURCES if sources is None else sources
    )


def _rejected(data: bytes, *keywords: str, expected: DeviceIdentity | None = IDENTITY) -> str:
    result, contents = _decode(data, expected)
    assert not result and contents is None, "a damaged file was accepted"
    assert result.reason and str(result).startswith("cache rejected: ")
    for word in keywords:
        assert word.lower() in result.reason.lower(), result.reason
    return result.reason


# -- round trip and inspection ---------------------------------------------------------------


class TestRoundTrip:
    def test_everything_comes_back(self) -> None:
        result, contents = _decode(DATA)
        assert result and result.reason == "loaded"
        assert (result.entries_used, result.entries_skipped, result.skipped) == (3, 0, ())
        assert contents == CONTENTS
        assert str(result) == "cache loaded: 3 SPIR-V entries"

    def test_equal_contents_give_equal_bytes(self) -> None:
        shuffled = dict(reversed(list(ENTRIES.items())))
        assert encode_cache(CacheContents(IDENTITY, shuffled, driver_blob())) == DATA

    def test_empty_cache_and_empty_blob(self) -> None:
        data = encode_cache(CacheContents(IDENTITY, {}, b""))
        assert len(data) == HEADER_SIZE
        result, contents = _decode(data)
        assert result and contents == CacheContents(IDENTITY, {}, b"")

    def test_no_expected_identity_accepts_any_and_reports_the_files(self) -> None:
        other = dataclasses.replace(IDENTITY, vendor_id=0x1002, device_id=0x744C)
        data = encode_cache(CacheContents(other, ENTRIES, driver_blob(other)))
        _rejected(data, "vendor_id", expected=IDENTITY)
        result, contents = _decode(data, expected=None)
        assert result and contents is not None
        assert contents.identity == dataclasses.replace(other, device_name="", driver_name="")

    def test_source_hashes_none_keeps_every_well_formed_entry(self) -> None:
        result, contents = decode_cache(DATA, expected=IDENTITY, source_hashes=None)
        assert result.entries_used == 3 and contents is not None

    def test_the_file_ends_exactly_after_the_driver_blob(self) -> None:
        assert DATA.endswith(driver_blob())
        assert LAYOUT["driver_blob"][1] == len(DATA)

    def test_encoder_refuses_what_the_reader_would_refuse(self) -> None:
        bad_blob = CacheContents(IDENTITY, {}, driver_blob(tail=b"")[:20])
        with pytest.raises(ValueError, match="driver blob"):
            encode_cache(bad_blob)
        with pytest.raises(ValueError, match="multiple of 4"):
            encode_cache(CacheContents(IDENTITY, {RELU: b"\x03\x02\x23\x07\x00"}, b""))
        with pytest.raises(ValueError, match="not SPIR-V"):
            encode_cache(CacheContents(IDENTITY, {RELU: bytes(8)}, b""))


class TestDescribe:
    def test_header_layout_and_entries(self) -> None:
        info = describe_cache(DATA)
        json.dumps(info)  # JSON-ready as is
        assert info["valid"] and info["reason"] == "loaded" and info["size"] == len(DATA)
        h = info["header"]
        assert h["magic"] == "AVKPCACH" and h["format_version"] == ff.FORMAT_VERSION
        assert h["asyncvk_version"] == __version__ and h["header_size"] == HEADER_SIZE
        assert (h["vendor_id"], h["device_id"]) == (0x10DE, 0x2330)
        assert h["driver_version"] == IDENTITY.driver_version
        assert h["pipeline_cache_uuid"] == IDENTITY.pipeline_cache_uuid.hex()
        assert h["device_name_hash"] == f"{ff.name_hash(IDENTITY.device_name):016x}"
        assert h["spirv_entry_count"] == 3
        assert info["driver_blob_bytes"] == len(driver_blob())
        assert list(info["layout"]) == ["header", "spirv_index", "spirv_bodies", "driver_blob"]
        assert info["layout"]["header"] == [0, HEADER_SIZE]
        shaders = [(e["shader"], e["option_bits"], e["size"]) for e in info["spirv_entries"]]
        assert shaders == [("relu", 0, 32), ("relu", 0x18, 48), ("softmax_reduce_max_pack4", 3, 80)]
        assert {e["status"] for e in info["spirv_entries"]} == {"ok"}

    def test_a_damaged_file_is_described_as_far_as_it_can_be(self) -> None:
        _key, start, _end = BODIES[1]
        info = describe_cache(_flip(DATA, start + 5))
        assert info["valid"]  # the file is usable; one entry is not
        statuses = [e["status"] for e in info["spirv_entries"]]
        assert statuses[0] == statuses[2] == "ok" and "checksum" in statuses[1]
        assert info["skipped"] and "'relu'" in info["skipped"][0]
        info = describe_cache(_flip(DATA, FIELDS["driver_id"][0]))
        assert not info["valid"] and "header authentication failed" in info["reason"]
        assert info["header"]["driver_id"] == IDENTITY.driver_id ^ 1

    @pytest.mark.parametrize("data", [b"", b"AVK", b"x" * 400, DATA[: HEADER_SIZE - 1]])
    def test_no_header_to_describe_is_a_value_error(self, data: bytes) -> None:
        with pytest.raises(ValueError, match=r"empty|truncated|magic"):
            describe_cache(data)


# -- whole-file rejection --------------------------------------------------------------------

CUTS: dict[str, tuple[Callable[[], int], str]] = {
    "empty": (lambda: 0, "empty"),
    "one_byte": (lambda: 1, "truncated header"),
    "inside_prefix": (lambda: 12, "truncated header"),
    "mid_header": (lambda: HEADER_SIZE // 2, "truncated header"),
    "header_minus_1": (lambda: HEADER_SIZE - 1, "truncated header"),
    "header_end": (lambda: HEADER_SIZE, "SPIR-V index section is truncated"),
    "mid_index": (lambda: sum(LAYOUT["spirv_index"]) // 2, "SPIR-V index section is truncated"),
    "index_minus_1": (lambda: LAYOUT["spirv_index"][1] - 1, "SPIR-V index section is truncated"),
    "index_end": (lambda: LAYOUT["spirv_index"][1], "SPIR-V bodies section is truncated"),
    "mid_first_body": (lambda: BODIES[0][1] + 6, "SPIR-V bodies section is truncated"),
    "mid_bodies": (lambda: sum(LAYOUT["spirv_bodies"]) // 2, "SPIR-V bodies section is truncated"),
    "bodies_end": (lambda: LAYOUT["spirv_bodies"][1], "driver blob section is truncated"),
    "mid_blob_header": (lambda: LAYOUT["driver_blob"][0] + 16, "driver blob section is truncated"),
    "last_byte_missing": (lambda: len(DATA) - 1, "driver blob section is truncated"),
}


@pytest.mark.parametrize("cut", list(CUTS))
def test_truncation_at_every_boundary_and_mid_section(cut: str) -> None:
    where, keyword = CUTS[cut]
    _rejected(DATA[: where()], keyword)


def _header_flip_keyword(field: str) -> str:
    return {
        "magic": "bad magic",
        "format_version": "format version",
        "header_size": "header size",
        "endian": "endian marker",
        "key_id": "another cache key",
    }.get(field, "header authentication failed")


@pytest.mark.parametrize("field", HEADER_FIELDS)
@pytest.mark.parametrize("bit", [0, 7])
def test_bit_flip_in_every_header_field(field: str, bit: int) -> None:
    start, size = FIELDS[field]
    for offset in (start, start + size - 1):
        _rejected(_flip(DATA, offset, bit), _header_flip_keyword(field))


@pytest.mark.parametrize(
    ("field", "value", "keywords"),
    [
        ("magic", b"NCNNFUTZ", ["bad magic", "AVKPCACH"]),
        ("format_version", 1, ["format version 1", f"reads {ff.FORMAT_VERSION}"]),
        ("format_version", 99, ["format version 99"]),
        ("header_size", 124, ["header size 124"]),
        ("endian", 0x04030201, ["endian marker 0x04030201"]),
        ("pointer_size", 4, ["pointer size 4"]),
        ("pointer_size", 16, ["pointer size 16"]),
        ("vendor_id", 0x1002, ["vendor_id is 0x1002", "0x10de"]),
        ("device_id", 0x744C, ["device_id is 0x744c", "0x2330"]),
        ("api_version", 4206592, ["api_version is 4206592", str(IDENTITY.api_version)]),
        ("driver_version", 1, ["driver_version is 1", str(IDENTITY.driver_version)]),
        ("driver_id", 9, ["driver_id is 9", "has 4"]),
        ("device_name_hash", 5, ["device_name_hash", "NVIDIA H100"]),
        ("driver_name_hash", 5, ["driver_name_hash", "'NVIDIA'"]),
        (
            "pipeline_cache_uuid",
            b"\xee" * 16,
            ["pipeline_cache_uuid", "ee" * 16, IDENTITY.pipeline_cache_uuid.hex()],
        ),
        ("asyncvk_version", b"0.0.9".ljust(32, b"\0"), ["written by asyncvk 0.0.9", __version__]),
        ("asyncvk_version_hash", 7, ["asyncvk version", __version__]),
    ],
)
def test_wrong_field_values_are_rejected_with_the_field_named(
    field: str, value: int | bytes, keywords: list[str]
) -> None:
    _rejected(_patch(DATA, field, value), *keywords)


@pytest.mark.parametrize(
    "change",
    [
        {"vendor_id": 0x8086},
        {"device_id": 0x56A0},
        {"api_version": 4198400},
        {"driver_version": 0x8A1D0000},
        {"driver_id": 1},
        {"device_name": "NVIDIA H100 PCIe"},
        {"driver_name": "nouveau"},
        {"pipeline_cache_uuid": b"\x01" * 16},
    ],
    ids=lambda change: next(iter(change)),
)
def test_a_file_written_on_another_device_or_driver_is_rejected(change: dict[str, object]) -> None:
    other = dataclasses.replace(IDENTITY, **change)  # type: ignore[arg-type]
    data = encode_cache(CacheContents(other, ENTRIES, driver_blob(other)))
    field = next(iter(change))
    field = field + "_hash" if field.endswith("_name") else field
    _rejected(data, "another GPU or driver", field)


def test_another_asyncvk_release_is_rejected() -> None:
    data = ff._encode(IDENTITY, ENTRIES.items(), driver_blob(), version="0.2.0")
    _rejected(data, "written by asyncvk 0.2.0", f"this is asyncvk {__version__}")


def test_long_release_strings_differing_after_32_bytes_are_told_apart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base = "1.0.0.dev20260722+g0123456789abcdef"  # longer than the 32-byte text field
    data = ff._encode(IDENTITY, ENTRIES.items(), driver_blob(), version=base + "0")
    monkeypatch.setattr(ff, "__version__", base + "1")
    _rejected(data, "written by asyncvk", base + "1")
    monkeypatch.setattr(ff, "__version__", base + "0")
    assert _decode(data)[0]


@pytest.mark.parametrize("field", ["index_size", "bodies_size", "driver_blob_size"])
@pytest.mark.parametrize("value", [1, 1 << 20, (1 << 64) - 1])
def test_declared_sizes_larger_than_the_file(field: str, value: int) -> None:
    declared = int.from_bytes(DATA[slice(FIELDS[field][0], sum(FIELDS[field]))], "little")
    data = _patch(DATA, field, min(declared + value, (1 << 64) - 1))
    _rejected(
        data,
        f"{field} ",
        "truncated or oversized",
        "declared sections end",
        f"file ({len(DATA)} bytes)",
    )


def test_entry_count_that_disagrees_with_the_index() -> None:
    _rejected(_patch(DATA, "spirv_entry_count", 4), "index ends inside entry 3")
    _rejected(_patch(DATA, "spirv_entry_count", 0xFFFFFFFF), "index ends inside entry 3")
    _rejected(_patch(DATA, "spirv_entry_count", 2), "bytes in the SPIR-V index after its last")


def test_trailing_garbage() -> None:
    _rejected(DATA + b"\0", "1 trailing bytes")
    _rejected(DATA + DATA, f"{len(DATA)} trailing bytes")


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_bit_flip_in_the_index_rejects_the_file(where: str) -> None:
    start, end = LAYOUT["spirv_index"]
    offset = {"first": start, "middle": (start + end) // 2, "last": end - 1}[where]
    _rejected(_flip(DATA, offset, 3), "SPIR-V index checksum mismatch")


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_bit_flip_in_the_driver_blob_rejects_the_file(where: str) -> None:
    start, end = LAYOUT["driver_blob"]
    offset = {"first": start, "middle": (start + end) // 2, "last": end - 1}[where]
    _rejected(_flip(DATA, offset, 5), "driver blob checksum mismatch")


def test_framing_damage_behind_a_valid_index_hash_rejects_the_file() -> None:
    """A buggy writer can hash a wrong index; its framing is still checked."""
    data = ff._encode(IDENTITY, ENTRIES.items(), b"")
    start, _ = FIELDS["bodies_size"]
    declared = int.from_bytes(data[start : start + 8], "little")
    longer = _patch(data + b"\0\0\0\0", "bodies_size", declared + 4)
    _rejected(longer, "4 bytes in the SPIR-V bodies section belong to no entry")


# -- the driver blob -------------------------------------------------------------------------

BAD_BLOBS = {
    "too_short": (driver_blob()[:31], "shorter than its 32-byte header"),
    "header_length_small": (struct.pack("<I", 16) + driver_blob()[4:], "headerLength 16"),
    "header_length_past_end": (struct.pack("<I", 4096) + driver_blob()[4:], "headerLength 4096"),
    "header_version_2": (
        driver_blob()[:4] + struct.pack("<I", 2) + driver_blob()[8:],
        "headerVersion 2",
    ),
    "other_vendor": (
        driver_blob(dataclasses.replace(IDENTITY, vendor_id=0x1002)),
        "vendorID 0x1002",
    ),
    "other_device": (driver_blob(dataclasses.replace(IDENTITY, device_id=0x1)), "deviceID 0x1"),
    "other_uuid": (
        driver_blob(dataclasses.replace(IDENTITY, pipeline_cache_uuid=b"\xab" * 16)),
        "pipelineCacheUUID " + "ab" * 16,
    ),
}


@pytest.mark.parametrize("case", list(BAD_BLOBS))
def test_a_blob_with_a_wrong_vulkan_header_rejects_the_file(case: str) -> None:
    blob, keyword = BAD_BLOBS[case]
    assert keyword in (validate_driver_blob(blob, IDENTITY) or "")
    data = ff._encode(IDENTITY, ENTRIES.items(), blob)
    _rejected(data, "driver blob", keyword)
    _rejected(data, keyword, expected=None)  # also checked against the file's own identity


def test_valid_blobs() -> None:
    assert validate_driver_blob(b"", IDENTITY) is None
    assert validate_driver_blob(driver_blob(tail=b""), IDENTITY) is None
    assert validate_driver_blob(driver_blob(), IDENTITY) is None


# -- per-entry skips -------------------------------------------------------------------------


@pytest.mark.parametrize("entry", range(len(BODIES)))
@pytest.mark.parametrize("where", ["magic_word", "middle", "last_byte"])
def test_bit_flip_in_a_spirv_body_skips_only_that_entry(entry: int, where: str) -> None:
    key, start, end = BODIES[entry]
    offset = {"magic_word": start, "middle": (start + end) // 2, "last_byte": end - 1}[where]
    result, contents = _decode(_flip(DATA, offset, 6))
    assert result and contents is not None, result.reason
    assert (result.entries_used, result.entries_skipped) == (2, 1)
    assert f"entry {entry} {key.shader!r}" in result.skipped[0]
    assert "checksum mismatch" in result.skipped[0]
    assert set(contents.spirv) == set(ENTRIES) - {key}
    assert contents.driver_blob == driver_blob()
    assert "1 skipped" in str(result)


def test_changed_shader_source_skips_its_entries_only() -> None:
    result, contents = _decode(DATA, sources={**SOURCES, "softmax_reduce_max_pack4": 0x9999})
    assert result and contents is not None
    assert set(contents.spirv) == {RELU, RELU_FP16}
    assert result.skipped == (
        "entry 2 'softmax_reduce_max_pack4' [option bits 0x3]: shader source changed since the "
        "file was written (source hash 0000000000002222 in the file, 0000000000009999 now)",
    )
    result, contents = _decode(DATA, sources={**SOURCES, "relu": 0})
    assert contents is not None and set(contents.spirv) == {SOFTMAX}
    assert result.entries_skipped == 2


def test_unknown_shaders_are_skipped() -> None:
    result, contents = _decode(DATA, sources={"relu": 0x1111})
    assert contents is not None and set(contents.spirv) == {RELU, RELU_FP16}
    assert "unknown shader" in result.skipped[0]


@pytest.mark.parametrize(
    ("body", "keyword"),
    [
        (b"", "SPIR-V size 0"),
        (spirv(4, 3)[:10], "SPIR-V size 10"),
        (bytes(16), "not SPIR-V: first word 0x00000000"),
        (struct.pack(">I", ff.SPIRV_MAGIC) + bytes(12), "not SPIR-V: first word 0x03022307"),
    ],
    ids=["empty", "ragged", "zero_magic", "byte_swapped"],
)
def test_malformed_spirv_skips_only_that_entry(body: bytes, keyword: str) -> None:
    bad = SpirvKey("relu", 0x7, 0x1111, 0xAAAA)
    data = ff._encode(IDENTITY, [*ENTRIES.items(), (bad, body)], driver_blob())
    result, contents = _decode(data)
    assert result and contents is not None
    assert set(contents.spirv) == set(ENTRIES)
    assert len(result.skipped) == 1
    assert result.skipped[0].startswith(f"entry 3 'relu' [option bits 0x7]: {keyword}")


def test_duplicate_keys_keep_the_first() -> None:
    first, second = spirv(7, 4), spirv(8, 4)
    data = ff._encode(IDENTITY, [(RELU, first), (SOFTMAX, ENTRIES[SOFTMAX]), (RELU, second)], b"")
    result, contents = _decode(data)
    assert contents is not None and contents.spirv[RELU] == first
    assert result.entries_used == 2 and "duplicate key" in result.skipped[0]
    # a damaged first copy is not "used", so the later good copy serves
    damaged = bytearray(data)
    damaged[describe_cache(data)["layout"]["spirv_bodies"][0] + 8] ^= 1
    result, contents = _decode(bytes(damaged))
    assert contents is not None and contents.spirv[RELU] == second
    assert "checksum" in result.skipped[0]


def test_a_name_that_is_not_utf8_skips_that_entry() -> None:
    data = ff._encode(IDENTITY, ENTRIES.items(), b"")
    raw = bytearray(data)
    index_start = HEADER_SIZE
    name_at = index_start + ff.ENTRY_SIZE
    assert raw[name_at : name_at + 4] == b"relu"
    raw[name_at] = 0xFF
    index = bytes(raw[HEADER_SIZE : describe_cache(data)["layout"]["spirv_index"][1]])
    data = _patch(bytes(raw), "index_hash", ff._hash16(index))
    result, contents = _decode(data, sources=None)
    assert result and contents is not None and result.entries_used == 2
    assert "not UTF-8" in result.skipped[0]


# -- entries bound to their keys -------------------------------------------------------------


def _records(data: bytes) -> list[tuple[int, int]]:
    """(offset of the record, offset of its body) of each index record in ``data``."""
    info = describe_cache(data)
    record, body = HEADER_SIZE, info["layout"]["spirv_bodies"][0]
    out = []
    for entry in info["spirv_entries"]:
        out.append((record, body))
        record += ff.ENTRY_SIZE + len(entry["shader"].encode())
        body += entry["size"]
    return out


def _reseal_index(raw: bytearray) -> bytes:
    end = describe_cache(bytes(raw))["layout"]["spirv_index"][1]
    return _patch(bytes(raw), "index_hash", ff._hash16(bytes(raw[HEADER_SIZE:end])))


def _body_only_hashes(data: bytes, positions: set[int]) -> bytes:
    """``data`` with the hashes of the entries at ``positions`` recomputed as format 2 did, over
    the body alone, and the index hash and header checksum resealed: every whole-file check
    passes, as in a file whose bodies were moved and whose checksums were then fixed up."""
    raw = bytearray(data)
    sizes = [e["size"] for e in describe_cache(data)["spirv_entries"]]
    for i, ((record, body), size) in enumerate(zip(_records(data), sizes, strict=True)):
        if i in positions:
            raw[record + 30 : record + 46] = ff._hash16(bytes(raw[body : body + size]))
    return _reseal_index(raw)


EXCHANGED = [(RELU, ENTRIES[SOFTMAX]), (RELU_FP16, ENTRIES[RELU_FP16]), (SOFTMAX, ENTRIES[RELU])]
COPIED = [(RELU, ENTRIES[RELU]), (RELU_FP16, ENTRIES[RELU]), (SOFTMAX, ENTRIES[SOFTMAX])]


@pytest.mark.parametrize(
    ("entries", "moved"),
    [(EXCHANGED, {RELU, SOFTMAX}), (COPIED, {RELU_FP16})],
    ids=["two_bodies_exchanged", "one_body_copied_over_another"],
)
def test_a_body_moved_under_another_key_fails_its_entry_hash(
    entries: list[tuple[SpirvKey, bytes]], moved: set[SpirvKey]
) -> None:
    positions = {i for i, (key, _) in enumerate(entries) if key in moved}
    data = _body_only_hashes(ff._encode(IDENTITY, entries, driver_blob()), positions)
    result, contents = _decode(data)
    assert result and contents is not None, result.reason
    assert set(contents.spirv) == set(ENTRIES) - moved
    assert result.entries_skipped == len(moved)
    for line in result.skipped:
        assert "checksum mismatch" in line and "another key" in line, line
    assert contents.spirv == {k: v for k, v in entries if k not in moved}


@pytest.mark.parametrize("field", ["name", "option_bits", "source_hash", "macro_hash"])
def test_the_entry_hash_covers_every_key_field(field: str) -> None:
    """A key field changed in the index (index hash resealed) no longer matches its entry."""
    raw = bytearray(DATA)
    record, _ = _records(DATA)[0]
    assert raw[record + ff.ENTRY_SIZE : record + ff.ENTRY_SIZE + 4] == b"relu"
    where = {"name": ff.ENTRY_SIZE, "option_bits": 2, "source_hash": 6, "macro_hash": 14}[field]
    raw[record + where] ^= 0x01  # "relu" becomes "selu"; a number changes in its low bit
    result, contents = _decode(_reseal_index(raw), sources=None)
    assert result and contents is not None, result.reason
    assert result.entries_used == 2 and "checksum mismatch" in result.skipped[0]


def test_a_wrong_body_hashed_under_its_key_is_not_this_layers_to_catch() -> None:
    """A writer that hashes a wrong body together with the key it files it under makes a file
    this layer accepts: the check against the shader's interface, at first use, is next."""
    result, contents = _decode(ff._encode(IDENTITY, EXCHANGED, b""))
    assert result and contents is not None and result.entries_skipped == 0
    assert contents.spirv[RELU] == ENTRIES[SOFTMAX]


def test_an_older_format_file_is_a_miss_that_names_both_versions() -> None:
    older = ff.FORMAT_VERSION - 1
    _rejected(
        _patch(DATA, "format_version", older),
        f"format version {older}",
        f"this asyncvk reads {ff.FORMAT_VERSION}",
    )


# -- every byte, exhaustively ----------------------------------------------------------------


def test_a_flipped_bit_anywhere_is_a_rejection_or_skips_exactly_its_entry() -> None:
    bodies = {off: key for key, start, end in BODIES for off in range(start, end)}
    for offset in range(len(DATA)):
        result, contents = _decode(_flip(DATA, offset, offset % 8))
        key = bodies.get(offset)
        if key is None:
            assert not result and contents is None and result.reason, offset
        else:
            assert result and contents is not None, (offset, result.reason)
            assert set(contents.spirv) == set(ENTRIES) - {key}, offset


def test_garbage_never_raises() -> None:
    import random

    rng = random.Random(7767517)
    prefix = DATA[:20]
    for n in range(400):
        size = rng.randrange(0, 600)
        garbage = bytes(rng.getrandbits(8) for _ in range(size))
        for data in (garbage, prefix + garbage, DATA[: rng.randrange(len(DATA))] + garbage):
            result, contents = _decode(data)
            assert result.reason and (contents is None) == (not result), n


# -- reading files ---------------------------------------------------------------------------


class TestReadSource:
    def test_path_bytes_and_file_objects(self, tmp_path: Path) -> None:
        path = tmp_path / "model.vkcache"
        path.write_bytes(DATA)
        assert read_cache_source(path) == DATA
        assert read_cache_source(str(path)) == DATA
        assert read_cache_source(DATA) == DATA
        assert read_cache_source(bytearray(DATA)) == DATA
        assert read_cache_source(io.BytesIO(DATA)) == DATA
        with open(path, "rb") as f:
            assert read_cache_source(f) == DATA

    def _fails(self, source: object, keyword: str, **kwargs: int) -> None:
        result = read_cache_source(source, **kwargs)  # type: ignore[arg-type]
        assert isinstance(result, CacheLoadResult) and not result, result
        assert keyword in result.reason, result.reason

    def test_zero_length_file_is_rejected_as_empty(self, tmp_path: Path) -> None:
        path = tmp_path / "empty.vkcache"
        path.touch()
        data = read_cache_source(path)
        assert data == b""
        _rejected(b"", "empty file")

    def test_directory_missing_and_unreadable_paths(self, tmp_path: Path) -> None:
        self._fails(tmp_path, "is a directory")
        self._fails(tmp_path / "nope.vkcache", "does not exist")
        (tmp_path / "file").write_bytes(DATA)
        self._fails(tmp_path / "file" / "inside", "cannot read")  # ENOTDIR
        self._fails("bad\0path", "cannot read")

    def test_a_fifo_is_refused_without_blocking(self, tmp_path: Path) -> None:
        fifo = tmp_path / "fifo"
        os.mkfifo(fifo)
        self._fails(fifo, "not a regular file")

    def test_a_2gib_sparse_file_is_rejected_by_size_before_reading(self, tmp_path: Path) -> None:
        path = tmp_path / "huge.vkcache"
        with open(path, "wb") as f:
            f.truncate(2 << 30)
        started = time.perf_counter()
        self._fails(path, "over the 268435456-byte size limit")
        with open(path, "rb") as f:
            self._fails(f, "size limit")
        assert time.perf_counter() - started < 0.5, "the file was read"

    def test_the_limit_is_a_parameter(self, tmp_path: Path) -> None:
        path = tmp_path / "model.vkcache"
        path.write_bytes(DATA)
        self._fails(path, f"has {len(DATA)} bytes, over the 100-byte", max_size=100)
        self._fails(DATA, "over the 100-byte", max_size=100)
        self._fails(io.BytesIO(DATA), "over the 100-byte", max_size=100)
        assert read_cache_source(path, max_size=len(DATA)) == DATA

    def test_a_text_mode_file_object_is_refused(self, tmp_path: Path) -> None:
        path = tmp_path / "model.vkcache"
        path.write_bytes(b"text")
        with open(path) as f:
            self._fails(f, "binary mode")


# -- real files of this device, through PipelineCache ------------------------------------------

LIVE_SPECS = [(float(i), i) for i in range(4)]


def _build(cache: PipelineCache) -> None:
    for spec in LIVE_SPECS:
        build_one(cache, PipelineSpec("scale_add", specializations=spec, local_size=(32, 1, 1)))
    build_one(cache, PipelineSpec("unary", specializations=(3, 0.0, 0.0), local_size=(32, 1, 1)))


def _outputs(device: VulkanDevice, cache: PipelineCache) -> list[np.ndarray]:
    x = np.linspace(-3, 3, 257, dtype=np.float32)
    results = []
    for spec in LIVE_SPECS:
        pipeline = build_one(
            cache, PipelineSpec("scale_add", specializations=spec, local_size=(32, 1, 1))
        )
        results.append(run_scale_add(device, pipeline, x, 0.25))
    return results


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory, device: VulkanDevice) -> Path:
    path = tmp_path_factory.mktemp("cache") / "model.vkcache"
    with PipelineCache(device) as cache:
        _build(cache)
        assert cache.save_cache(path)
    return path


def _expect_miss(cache: PipelineCache, source: object, needle: str) -> None:
    """``source`` is a miss whose reason holds ``needle``, and nothing of it was committed."""
    result = cache.load_cache(source)  # type: ignore[arg-type]
    assert not result, "a damaged file was accepted"
    assert result.reason and needle in result.reason, result.reason
    assert cache.spirv_entries() == {}, "a rejected file committed entries"


def test_round_trip_compiles_no_glsl_and_gives_identical_outputs(
    device: VulkanDevice, saved: Path
) -> None:
    with PipelineCache(device) as cold:
        cold_out = _outputs(device, cold)
    with PipelineCache(device) as warm:
        result = warm.load_cache(saved)
        assert result, result.reason
        assert result.entries_used == 2
        warm_out = _outputs(device, warm)
        _build(warm)
        assert warm.statistics().spirv_compiles == 0
        assert warm.statistics().spirv_hits >= 1
    for a, b in zip(cold_out, warm_out, strict=True):
        assert a.tobytes() == b.tobytes()


def test_load_from_bytes_and_file_object(device: VulkanDevice, saved: Path) -> None:
    with PipelineCache(device) as cache:
        assert cache.load_cache(saved.read_bytes())
    with PipelineCache(device) as cache, open(saved, "rb") as f:
        assert cache.load_cache(f)


def test_save_to_bytes_matches_the_format(device: VulkanDevice) -> None:
    with PipelineCache(device) as cache:
        _build(cache)
        info = describe_cache(cache.save_cache())
    assert info["valid"]
    assert {e["shader"] for e in info["spirv_entries"]} == {"scale_add", "unary"}
    assert info["header"]["vendor_id"] == device.info.vendor_id


def _real_damage(data: bytes, device: VulkanDevice) -> dict[str, tuple[bytes, str]]:
    """Damaged copies of a real file of this device: case -> (bytes, word the reason holds)."""
    layout = describe_cache(data)["layout"]
    mine = device.info.identity
    _result, contents = decode_cache(data, expected=mine, source_hashes=None)
    assert contents is not None
    cases = {
        f"cut_at_{name}_{where}": (data[:cut], "truncated")
        for name, (start, end) in layout.items()
        for where, cut in (("start", start), ("middle", (start + end) // 2), ("end", end - 1))
        if 0 < cut < len(data)
    }
    cases |= {f"header_{field}_flipped": (_flip(data, FIELDS[field][0]), "") for field in FIELDS}
    cases |= {
        f"wrong_{field}": (_patch(data, field, value), field)
        for field, value in (
            ("vendor_id", mine.vendor_id ^ 1),
            ("device_id", mine.device_id ^ 1),
            ("driver_version", mine.driver_version ^ 1),
            ("driver_id", mine.driver_id ^ 1),
            ("pipeline_cache_uuid", bytes(b ^ 0xEE for b in mine.pipeline_cache_uuid)),
        )
    }
    other_name = dataclasses.replace(contents.identity, device_name="Another GPU")
    cases["another_device_name"] = (
        encode_cache(CacheContents(other_name, contents.spirv, contents.driver_blob)),
        "device_name_hash",
    )
    cases["index_flipped"] = (_flip(data, HEADER_SIZE + 3, 4), "index checksum")
    if layout["driver_blob"][0] < layout["driver_blob"][1]:  # this driver saves cache data
        cases["blob_flipped"] = (_flip(data, len(data) - 1), "driver blob checksum")
    cases["empty"] = (b"", "empty")
    cases["trailing_garbage"] = (data + b"\0garbage", "trailing bytes")
    return cases


def test_a_damaged_real_file_is_a_miss_that_commits_nothing(
    device: VulkanDevice, saved: Path
) -> None:
    with PipelineCache(device) as cache:
        for case, (data, needle) in _real_damage(saved.read_bytes(), device).items():
            try:
                _expect_miss(cache, data, needle)
            except AssertionError as exc:
                raise AssertionError(f"{case}: {exc}") from None
        # the cache still works: a miss, not a failure
        assert build_one(cache, PipelineSpec("scale_add", specializations=(1.0, 0))).handle


def test_a_directory_a_missing_path_and_a_sparse_file_are_misses(
    device: VulkanDevice, tmp_path: Path
) -> None:
    sparse = tmp_path / "sparse.vkcache"
    with open(sparse, "wb") as f:
        f.truncate(2 << 30)
    with PipelineCache(device) as cache:
        _expect_miss(cache, tmp_path, "directory")
        _expect_miss(cache, sparse, "limit")
        _expect_miss(cache, tmp_path / "nope.vkcache", "does not exist")


def test_damaged_spirv_entry_is_skipped_alone(device: VulkanDevice, saved: Path) -> None:
    data = saved.read_bytes()
    data = _flip(data, describe_cache(data)["layout"]["spirv_index"][1] + 40)  # first body
    with PipelineCache(device) as cache:
        result = cache.load_cache(data)
        assert result, result.reason
        assert result.entries_used == 1 and result.entries_skipped == 1
        assert "checksum" in result.skipped[0]
        _build(cache)  # the damaged one is rebuilt; outputs stay right
        assert cache.statistics().spirv_compiles == 1
        x = _outputs(device, cache)
    np.testing.assert_allclose(
        x[2], np.linspace(-3, 3, 257, dtype=np.float32) * 2 + 2.25, rtol=1e-6
    )


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "asyncvk", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
    )


def test_cache_verify_and_inspect_cli(saved: Path, tmp_path: Path) -> None:
    ok = _cli("cache", "verify", str(saved))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = tmp_path / "bad.vkcache"
    data = bytearray(saved.read_bytes())
    data[10] ^= 0xFF
    bad.write_bytes(bytes(data))
    rejected = _cli("cache", "verify", str(bad))
    assert rejected.returncode == 1
    assert "not usable" in rejected.stdout and "built from source" in rejected.stdout
    truncated = tmp_path / "short.vkcache"
    truncated.write_bytes(saved.read_bytes()[:-3])
    assert _cli("cache", "verify", str(truncated)).returncode == 1
    inspect = _cli("cache", "inspect", str(saved), "--json")
    assert inspect.returncode == 0
    assert '"scale_add"' in inspect.stdout and '"accepted": true' in inspect.stdout
    # without --json: a summary for people (no JSON), and a non-zero exit for an invalid file
    summary = _cli("cache", "inspect", str(saved))
    assert summary.returncode == 0 and not summary.stdout.lstrip().startswith("{")
    assert "this machine's device" in summary.stdout and "scale_add" in summary.stdout
    assert "accepted: all" in summary.stdout
    short = _cli("cache", "inspect", str(truncated))
    assert short.returncode == 1 and "INVALID" in short.stdout
