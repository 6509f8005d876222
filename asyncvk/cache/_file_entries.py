"""Decoding a cache file: section bounds, the SPIR-V index, and each entry judged alone.

The header and the index frame the file, so damage there rejects the whole file; a damaged or
outdated body is skipped alone and the rest of the file is still used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..gpu._identity import DeviceIdentity
from ._cache_key import CacheKey
from ._file_format import (
    _ENTRY,
    ENTRY_SIZE,
    HEADER_SIZE,
    CacheContents,
    CacheLoadResult,
    _body_problem,
    _check_header,
    _hash16,
    _header_identity,
    entry_hash,
    validate_driver_blob,
)
from ._keys import SpirvKey


@dataclass(frozen=True)
class _Sections:
    index: memoryview
    bodies: memoryview
    blob: memoryview


def _check_sections(data: memoryview, h: Mapping[str, Any]) -> _Sections | str:
    """Section bounds and the whole-section hashes (index, blob)."""
    size = len(data)
    fields = ("index_size", "bodies_size", "driver_blob_size")
    names = ("SPIR-V index", "SPIR-V bodies", "driver blob")
    total = HEADER_SIZE + sum(h[f] for f in fields)
    end = HEADER_SIZE
    bounds = []
    for section, field in zip(names, fields, strict=True):
        start, end = end, end + h[field]
        if end > size:
            sizes = " + ".join(f"{f} {h[f]}" for f in fields)
            return (
                f"the {section} section is truncated or oversized: declared sections end at "
                f"byte {total} (header {HEADER_SIZE} + {sizes}), past the end of the file "
                f"({size} bytes)"
            )
        bounds.append((start, end))
    if end < size:
        return f"{size - end} trailing bytes after the driver blob (the file should end at {end})"
    sections = _Sections(*(data[a:b] for a, b in bounds))
    computed = _hash16(sections.index)
    if computed != h["index_hash"]:
        return (
            f"SPIR-V index checksum mismatch: the entry headers are damaged (stored "
            f"{h['index_hash'].hex()}, computed {computed.hex()})"
        )
    computed = _hash16(sections.blob) if sections.blob else bytes(16)
    if computed != h["driver_blob_hash"]:
        return (
            f"driver blob checksum mismatch: the blob is damaged (stored "
            f"{h['driver_blob_hash'].hex()}, computed {computed.hex()})"
        )
    return sections


@dataclass(frozen=True)
class _Record:
    """One index record and its body, before any per-entry judgement."""

    position: int
    raw_name: bytes
    option_bits: int
    source_hash: int
    macro_hash: int
    digest: bytes
    body: memoryview

    @property
    def name(self) -> str:
        return self.raw_name.decode("utf-8", "backslashreplace")

    @property
    def key(self) -> SpirvKey | None:
        """None when the name is not UTF-8: such an entry can never be asked for."""
        try:
            name = self.raw_name.decode("utf-8")
        except UnicodeDecodeError:
            return None
        return SpirvKey(name, self.option_bits, self.source_hash, self.macro_hash)

    @property
    def label(self) -> str:
        return f"entry {self.position} {self.name!r} [option bits 0x{self.option_bits:x}]"


def _parse_index(h: Mapping[str, Any], sections: _Sections) -> list[_Record] | str:
    """Walk the index; any framing fault rejects the file, since later offsets depend on it."""
    index, bodies = sections.index, sections.bodies
    count = h["spirv_entry_count"]
    records: list[_Record] = []
    pos = body = 0
    for i in range(count):
        if pos + ENTRY_SIZE > len(index):
            return f"SPIR-V index ends inside entry {i} of spirv_entry_count {count}"
        name_len, bits, source, macro, size, digest = _ENTRY.unpack_from(index, pos)
        pos += ENTRY_SIZE
        if pos + name_len > len(index):
            return f"SPIR-V index ends inside the name of entry {i}"
        raw = bytes(index[pos : pos + name_len])
        pos += name_len
        if body + size > len(bodies):
            return (
                f"SPIR-V entry {i} declares {size} bytes, past the end of the SPIR-V bodies "
                f"section ({len(bodies) - body} bytes left)"
            )
        records.append(_Record(i, raw, bits, source, macro, digest, bodies[body : body + size]))
        body += size
    if pos != len(index):
        return f"{len(index) - pos} bytes in the SPIR-V index after its last entry"
    if body != len(bodies):
        return f"{len(bodies) - body} bytes in the SPIR-V bodies section belong to no entry"
    return records


def _record_problem(rec: _Record, source_hashes: Mapping[str, int] | None) -> str | None:
    """Why one entry cannot be used on its own merits, or None."""
    key = rec.key
    if key is None:
        return "shader name is not UTF-8"
    computed = entry_hash(rec.raw_name, rec.option_bits, rec.source_hash, rec.macro_hash, rec.body)
    if computed != rec.digest:
        return (
            "SPIR-V checksum mismatch: the body is damaged, or it belongs to another key "
            "(the entry hash covers the key and the body)"
        )
    problem = _body_problem(rec.body)
    if problem is not None or source_hashes is None:
        return problem
    current = source_hashes.get(key.shader)
    if current is None:
        return "unknown shader (not in this build)"
    if current != key.source_hash:
        return (
            f"shader source changed since the file was written (source hash "
            f"{key.source_hash:016x} in the file, {current:016x} now)"
        )
    return None


def _judge(records: list[_Record], source_hashes: Mapping[str, int] | None) -> list[str | None]:
    """Per record, why it is skipped (None = used); a later copy of a used key is skipped."""
    used: set[SpirvKey] = set()
    verdicts: list[str | None] = []
    for rec in records:
        problem = _record_problem(rec, source_hashes)
        key = rec.key
        if problem is None and key is not None:
            if key in used:
                problem = "duplicate key (an earlier entry with this key is used)"
            used.add(key)
        verdicts.append(problem)
    return verdicts


def _fail(reason: str) -> tuple[CacheLoadResult, None]:
    return CacheLoadResult(False, reason), None


def decode_cache(
    data: bytes,
    *,
    expected: DeviceIdentity | None,
    source_hashes: Mapping[str, int] | None,
    cache_key: CacheKey | None = None,
) -> tuple[CacheLoadResult, CacheContents | None]:
    """Validate and decode a cache file; never raises for bad content.

    :param expected: the identity the file must match; None accepts any (``cache inspect``).
    :param cache_key: the key the file must be sealed with (default: this user's cache key).
    :param source_hashes: shader name -> current source hash; an entry whose shader is absent
        or whose hash differs is skipped. None keeps every well-formed entry.
    :returns: (falsy result with the reason, None) when the whole file is rejected, else
        (result with per-entry skips, contents). Nothing is returned before every check passed.
    """
    view = memoryview(data).cast("B")
    h = _check_header(view, expected, cache_key)
    if isinstance(h, str):
        return _fail(h)
    sections = _check_sections(view, h)
    if isinstance(sections, str):
        return _fail(sections)
    identity = expected or _header_identity(h)
    reason = validate_driver_blob(bytes(sections.blob), identity)
    if reason is not None:
        return _fail(reason)
    records = _parse_index(h, sections)
    if isinstance(records, str):
        return _fail(records)
    entries: dict[SpirvKey, bytes] = {}
    skipped: list[str] = []
    for rec, problem in zip(records, _judge(records, source_hashes), strict=True):
        entry_key = rec.key
        if problem is not None or entry_key is None:
            skipped.append(f"{rec.label}: {problem}")
        else:
            entries[entry_key] = bytes(rec.body)
    result = CacheLoadResult(True, "loaded", len(entries), len(skipped), tuple(skipped))
    return result, CacheContents(identity, entries, bytes(sections.blob))
