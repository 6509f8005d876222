"""The JSON index of one graph key in a cache folder, parsed against a strict schema.

Anyone who can write the folder can write the index, so nothing in it is trusted: the file's
size and nesting are bounded before parsing, and every field's type and range is checked after.
Any deviation is an ``IndexError_`` with a reason naming the field; the caller treats it as a
miss and rebuilds the index from the cache files present.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass
from typing import Any

from ..gpu._identity import MATCH_FIELDS
from ._safe_fs import open_regular

__all__ = (
    "INDEX_MARKER",
    "INDEX_VERSION",
    "MAX_INDEX_BYTES",
    "MAX_INDEX_ENTRIES",
    "IndexEntry",
    "InvalidIndex",
    "encode_index",
    "parse_index",
    "read_index_file",
)

INDEX_VERSION = 3  # 3: a device holds its whole match key; older indexes are rebuilt
INDEX_MARKER = "asyncvk_cache_index"  # the first key: says what the file is to a reader
MAX_INDEX_BYTES = 1 << 20  # one entry per device is about 400 bytes
MAX_INDEX_ENTRIES = 1024
_MAX_TEXT = 256
_HEX = re.compile(r"^[0-9a-f]*$")
_U32 = (0, 0xFFFFFFFF)
_U64 = (0, (1 << 64) - 1)


class InvalidIndex(ValueError):
    """The index file is not one asyncvk wrote, or was damaged or tampered with."""


@dataclass
class IndexEntry:
    file: str
    graph_key: str
    device: dict[str, Any]
    model_fingerprint: str | None
    asyncvk_version: str
    created: float
    last_used: float
    size: int


def _text(value: Any, where: str, *, hex_only: bool = False, length: int | None = None) -> str:
    if not isinstance(value, str) or len(value) > _MAX_TEXT:
        raise InvalidIndex(f"{where} must be a string of at most {_MAX_TEXT} characters")
    if hex_only and not _HEX.match(value):
        raise InvalidIndex(f"{where} must be lowercase hex")
    if length is not None and len(value) != length:
        raise InvalidIndex(f"{where} must be {length} characters long")
    return value


def _integer(value: Any, where: str, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise InvalidIndex(f"{where} must be an integer in [{low}, {high}]")
    return value


def _time(value: Any, where: str) -> float:
    if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
        raise InvalidIndex(f"{where} must be a finite, non-negative number of seconds")
    return float(value)


def _object(value: Any, where: str, keys: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidIndex(f"{where} must be an object")
    if set(value) != keys:
        missing, extra = sorted(keys - set(value)), sorted(set(value) - keys)
        raise InvalidIndex(f"{where} has missing fields {missing} or unknown fields {extra}")
    return value


def _device(value: Any, where: str) -> dict[str, Any]:
    """A device: its match key (``DeviceIdentity.MATCH_FIELDS``) and its name, for display."""
    raw = _object(value, where, {*MATCH_FIELDS, "device_name"})
    device: dict[str, Any] = {}
    for field in MATCH_FIELDS:
        at = f"{where}.{field}"
        if field == "pipeline_cache_uuid":
            device[field] = _text(raw[field], at, hex_only=True, length=32)
        else:
            device[field] = _integer(raw[field], at, *(_U64 if field.endswith("_hash") else _U32))
    device["device_name"] = _text(raw["device_name"], f"{where}.device_name")
    return device


def _entry(value: Any, where: str, file_pattern: re.Pattern[str]) -> IndexEntry:
    raw = _object(value, where, set(IndexEntry.__dataclass_fields__))
    file = _text(raw["file"], f"{where}.file")
    if not file_pattern.fullmatch(file):
        raise InvalidIndex(f"{where}.file {file!r} is not a cache file name of this key")
    fingerprint = raw["model_fingerprint"]
    if fingerprint is not None:
        fingerprint = _text(fingerprint, f"{where}.model_fingerprint")
    return IndexEntry(
        file=file,
        graph_key=_text(raw["graph_key"], f"{where}.graph_key"),
        device=_device(raw["device"], f"{where}.device"),
        model_fingerprint=fingerprint,
        asyncvk_version=_text(raw["asyncvk_version"], f"{where}.asyncvk_version"),
        created=_time(raw["created"], f"{where}.created"),
        last_used=_time(raw["last_used"], f"{where}.last_used"),
        size=_integer(raw["size"], f"{where}.size", 0, 1 << 40),
    )


def parse_index(data: bytes, graph_key: str, file_pattern: re.Pattern[str]) -> list[IndexEntry]:
    """The entries of an index file's bytes.

    :raises InvalidIndex: the bytes are not a valid index of ``graph_key``, with the reason.
    """
    if len(data) > MAX_INDEX_BYTES:
        raise InvalidIndex(f"{len(data)} bytes, over the {MAX_INDEX_BYTES}-byte limit")
    try:
        raw = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise InvalidIndex("nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidIndex(f"not JSON ({exc})") from None
    top = _object(raw, "the index", {INDEX_MARKER, "graph_key", "entries"})
    if top[INDEX_MARKER] != INDEX_VERSION:
        raise InvalidIndex(f"{INDEX_MARKER} is {top[INDEX_MARKER]!r}, expected {INDEX_VERSION}")
    if top["graph_key"] != graph_key:
        raise InvalidIndex(f"graph_key is {top['graph_key']!r}, expected {graph_key!r}")
    entries = top["entries"]
    if not isinstance(entries, list) or len(entries) > MAX_INDEX_ENTRIES:
        raise InvalidIndex(f"entries must be a list of at most {MAX_INDEX_ENTRIES} objects")
    parsed = [_entry(e, f"entries[{i}]", file_pattern) for i, e in enumerate(entries)]
    if len({e.file for e in parsed}) != len(parsed):
        raise InvalidIndex("two entries name the same file")
    return parsed


def encode_index(graph_key: str, entries: list[IndexEntry]) -> bytes:
    data = {
        INDEX_MARKER: INDEX_VERSION,
        "graph_key": graph_key,
        "entries": [asdict(e) for e in entries],
    }
    return json.dumps(data, indent=1).encode()


def read_index_file(path: str | os.PathLike[str]) -> bytes:
    """An index file's bytes, never through a symlink, never more than the size limit.

    :raises FileNotFoundError: there is no index.
    :raises OSError: it cannot be read, or is a symlink or not a regular file (UnsafePathError).
    :raises InvalidIndex: it is over the size limit.
    """
    fd = open_regular(path)
    with os.fdopen(fd, "rb") as f:
        data = f.read(MAX_INDEX_BYTES + 1)
    if len(data) > MAX_INDEX_BYTES:
        raise InvalidIndex(f"over the {MAX_INDEX_BYTES}-byte limit")
    return data
