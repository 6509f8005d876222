"""The persistent cache file: its layout, encoding, and a validation that can only ever miss.

Layout (little-endian, no padding; ``docs/cache-format.md`` is the full description)::

    header       fixed struct; identity, section sizes and hashes; its own checksum at the end
    SPIR-V index one record per entry: key, body size, entry hash     (hashed in the header)
    SPIR-V bodies the words of each entry, in index order             (key + body in its record)
    driver blob  vkGetPipelineCacheData output; the file ends here     (hashed in the header)

Every byte is covered by a checksum. The header and the index frame the file, so damage there
rejects the whole file; a body only carries words, so a damaged or outdated body is skipped
alone and the rest of the file is still used. An entry's hash covers its key as well as its
body, so a body that ends up under another key (a writer's bug, two bodies exchanged) fails it.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from .._version import __version__
from ..gpu._identity import DeviceIdentity
from ._keys import SpirvKey

MAGIC = b"AVKPCACH"
FORMAT_VERSION = 3
ENDIAN_MARKER = 0x01020304
POINTER_SIZE = struct.calcsize("P")
MAX_FILE_SIZE = 256 << 20
SPIRV_MAGIC = 0x07230203
BLOB_HEADER_SIZE = 32  # VkPipelineCacheHeaderVersionOne

# The first 20 bytes keep this layout in every format version, so any version can be named.
_PREFIX = struct.Struct("<8sIII")  # magic, format version, header size, endian marker
#: The header, field by field (name, struct code): its struct, its field names and the writer
#: all come from this one table, so they cannot drift apart.
_HEADER_LAYOUT = (
    ("magic", "8s"),
    ("format_version", "I"),
    ("header_size", "I"),
    ("endian", "I"),
    ("pointer_size", "I"),
    ("asyncvk_version", "32s"),
    ("asyncvk_version_hash", "Q"),
    ("vendor_id", "I"),
    ("device_id", "I"),
    ("api_version", "I"),
    ("driver_version", "I"),
    ("driver_id", "I"),
    ("device_name_hash", "Q"),
    ("driver_name_hash", "Q"),
    ("pipeline_cache_uuid", "16s"),
    ("spirv_entry_count", "I"),
    ("index_size", "Q"),
    ("index_hash", "16s"),
    ("bodies_size", "Q"),
    ("driver_blob_size", "Q"),
    ("driver_blob_hash", "16s"),
    ("header_hash", "16s"),
)
_HEADER = struct.Struct("<" + "".join(code for _, code in _HEADER_LAYOUT))
HEADER_SIZE = _HEADER.size
HEADER_FIELDS = tuple(name for name, _ in _HEADER_LAYOUT)
# name length, option bits, source hash, macro hash, body size, entry hash; then the UTF-8 name
_ENTRY = struct.Struct("<HIQQQ16s")
ENTRY_SIZE = _ENTRY.size
# the key fields as the entry hash sees them: name length, option bits, source hash, macro hash
_ENTRY_KEY = struct.Struct("<HIQQ")

__all__ = (
    "CacheContents",
    "CacheLoadResult",
    "SpirvKey",
    "decode_cache",
    "describe_cache",
    "encode_cache",
    "read_cache_source",
    "validate_driver_blob",
)


def _hash16(data: bytes | bytearray | memoryview) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def entry_hash(
    raw_name: bytes, option_bits: int, source_hash: int, macro_hash: int, body: bytes | memoryview
) -> bytes:
    """blake2b-128 of an entry's key fields, its name and its body: binds the body to its key."""
    h = hashlib.blake2b(digest_size=16)
    h.update(_ENTRY_KEY.pack(len(raw_name), option_bits, source_hash, macro_hash))
    h.update(raw_name)
    h.update(body)
    return h.digest()


def name_hash(text: str) -> int:
    """blake2b-64 of a name: the file stores names only as hashes, as identity, not for display."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


def _version_field(version: str) -> bytes:
    return version.encode()[:32].ljust(32, b"\0")


@dataclass(frozen=True)
class CacheContents:
    """What a cache file holds: whose it is, the SPIR-V entries, and the driver's blob."""

    identity: DeviceIdentity
    spirv: Mapping[SpirvKey, bytes]
    driver_blob: bytes


@dataclass(frozen=True)
class CacheLoadResult:
    """Truthy on success; otherwise ``reason`` says why the file was a miss.

    ``skipped`` has one line per entry that was left out of an accepted file.
    """

    ok: bool
    reason: str
    entries_used: int = 0
    entries_skipped: int = 0
    skipped: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        if not self.ok:
            return f"cache rejected: {self.reason}"
        text = f"cache loaded: {self.entries_used} SPIR-V entries"
        if self.entries_skipped:
            text += f", {self.entries_skipped} skipped ({'; '.join(self.skipped)})"
        return text


# -- encoding --------------------------------------------------------------------------------


def encode_cache(contents: CacheContents) -> bytes:
    """Serialise ``contents``; raises ValueError for anything the reader would refuse.

    Entries are written in key order, so equal contents always give equal bytes.
    """
    reason = validate_driver_blob(contents.driver_blob, contents.identity)
    if reason is not None:
        raise ValueError(f"not writing a driver blob the reader would reject: {reason}")
    for key, words in contents.spirv.items():
        problem = _body_problem(memoryview(words))
        if problem is not None:
            raise ValueError(f"SPIR-V entry {key.shader!r}: {problem}")
    entries = sorted(
        contents.spirv.items(),
        key=lambda kv: (kv[0].shader, kv[0].option_bits, kv[0].source_hash, kv[0].macro_hash),
    )
    return _encode(contents.identity, entries, contents.driver_blob)


def _encode(
    identity: DeviceIdentity,
    entries: Iterable[tuple[SpirvKey, bytes]],
    blob: bytes,
    *,
    version: str = __version__,
) -> bytes:
    """The raw writer, without checks: tests use it to build files the reader must refuse."""
    index = bytearray()
    bodies = bytearray()
    count = 0
    for key, words in entries:
        name = key.shader.encode()
        try:
            index += _ENTRY.pack(
                len(name),
                key.option_bits,
                key.source_hash,
                key.macro_hash,
                len(words),
                entry_hash(name, key.option_bits, key.source_hash, key.macro_hash, words),
            )
        except struct.error as exc:
            raise ValueError(f"SPIR-V key {key} does not fit the file format: {exc}") from None
        index += name
        bodies += words
        count += 1
    values: dict[str, Any] = {
        "magic": MAGIC,
        "format_version": FORMAT_VERSION,
        "header_size": HEADER_SIZE,
        "endian": ENDIAN_MARKER,
        "pointer_size": POINTER_SIZE,
        "asyncvk_version": _version_field(version),
        "asyncvk_version_hash": name_hash(version),
        "vendor_id": identity.vendor_id,
        "device_id": identity.device_id,
        "api_version": identity.api_version,
        "driver_version": identity.driver_version,
        "driver_id": identity.driver_id,
        "device_name_hash": name_hash(identity.device_name),
        "driver_name_hash": name_hash(identity.driver_name),
        "pipeline_cache_uuid": identity.pipeline_cache_uuid,
        "spirv_entry_count": count,
        "index_size": len(index),
        "index_hash": _hash16(index),
        "bodies_size": len(bodies),
        "driver_blob_size": len(blob),
        "driver_blob_hash": _hash16(blob) if blob else bytes(16),
        "header_hash": bytes(16),
    }
    unsealed = _HEADER.pack(*(values[name] for name in HEADER_FIELDS))
    values["header_hash"] = _hash16(unsealed[:-16])
    header = _HEADER.pack(*(values[name] for name in HEADER_FIELDS))
    return b"".join((header, index, bodies, blob))


# -- validation ------------------------------------------------------------------------------


def validate_driver_blob(blob: bytes, identity: DeviceIdentity) -> str | None:
    """Check ``VkPipelineCacheHeaderVersionOne`` before a driver sees the blob.

    Returns None when the blob is acceptable (an empty blob is), else the reason. Drivers are
    not required to survive a blob of another device, so this runs on every load and save.
    """
    if not blob:
        return None
    size = len(blob)
    if size < BLOB_HEADER_SIZE:
        return f"driver blob of {size} bytes is shorter than its {BLOB_HEADER_SIZE}-byte header"
    length, version, vendor, device = struct.unpack_from("<IIII", blob, 0)
    uuid = bytes(blob[16:32])
    if not BLOB_HEADER_SIZE <= length <= size:
        return f"driver blob headerLength {length} is outside {BLOB_HEADER_SIZE}..{size}"
    if version != 1:
        return f"driver blob headerVersion {version} (expected 1)"
    if vendor != identity.vendor_id or device != identity.device_id:
        return (
            f"driver blob is for vendorID 0x{vendor:x} deviceID 0x{device:x}, this device is "
            f"vendorID 0x{identity.vendor_id:x} deviceID 0x{identity.device_id:x}"
        )
    if uuid != identity.pipeline_cache_uuid:
        return (
            f"driver blob pipelineCacheUUID {uuid.hex()} differs from this driver's "
            f"{identity.pipeline_cache_uuid.hex()}"
        )
    return None


def _unpack_header(data: bytes | memoryview) -> dict[str, Any]:
    return dict(zip(HEADER_FIELDS, _HEADER.unpack_from(data, 0), strict=True))


def _check_prefix(data: memoryview) -> str | None:
    """The fields that say whether the rest can be read at all."""
    size = len(data)
    if size == 0:
        return "empty file (0 bytes)"
    if size < _PREFIX.size:
        return f"truncated header: the file has {size} bytes, the header needs {HEADER_SIZE}"
    magic, version, header_size, endian = _PREFIX.unpack_from(data, 0)
    if magic != MAGIC:
        return f"bad magic {bytes(magic)!r} (expected {MAGIC!r}): not an asyncvk cache file"
    if endian != ENDIAN_MARKER:
        return (
            f"endian marker 0x{endian:08x} (expected 0x{ENDIAN_MARKER:08x}): "
            "written with another byte order"
        )
    if version != FORMAT_VERSION:
        return f"format version {version} (this asyncvk reads {FORMAT_VERSION})"
    if header_size != HEADER_SIZE:
        return f"header size {header_size} (format {FORMAT_VERSION} has {HEADER_SIZE})"
    if size < HEADER_SIZE:
        return f"truncated header: the file has {size} bytes, the header needs {HEADER_SIZE}"
    return None


def _header_identity(h: Mapping[str, Any]) -> DeviceIdentity:
    """The identity a file declares; names are stored only as hashes, so they come back empty."""
    return DeviceIdentity(
        h["vendor_id"],
        h["device_id"],
        h["api_version"],
        h["driver_version"],
        h["driver_id"],
        "",
        "",
        h["pipeline_cache_uuid"],
    )


def _identity_mismatch(h: Mapping[str, Any], ident: DeviceIdentity) -> str | None:
    checks: list[tuple[str, Any, Any]] = [
        ("vendor_id", h["vendor_id"], ident.vendor_id),
        ("device_id", h["device_id"], ident.device_id),
        ("api_version", h["api_version"], ident.api_version),
        ("driver_version", h["driver_version"], ident.driver_version),
        ("driver_id", h["driver_id"], ident.driver_id),
        ("device_name_hash", h["device_name_hash"], name_hash(ident.device_name)),
        ("driver_name_hash", h["driver_name_hash"], name_hash(ident.driver_name)),
        ("pipeline_cache_uuid", h["pipeline_cache_uuid"], ident.pipeline_cache_uuid),
    ]
    for field, got, want in checks:
        if got == want:
            continue
        if isinstance(got, bytes):
            got, want = got.hex(), want.hex()
        elif field.endswith("_hash"):
            name = ident.device_name if field.startswith("device") else ident.driver_name
            got, want = f"{got:016x}", f"{want:016x} (of {name!r})"
        elif field in ("vendor_id", "device_id"):
            got, want = f"0x{got:x}", f"0x{want:x}"
        return (
            f"written for another GPU or driver: {field} is {got} in the file, "
            f"this device has {want}"
        )
    return None


def _check_header(data: memoryview, expected: DeviceIdentity | None) -> dict[str, Any] | str:
    """The header's fields, or why the file is rejected on them alone."""
    problem = _check_prefix(data)
    if problem is not None:
        return problem
    h = _unpack_header(data)
    computed = _hash16(data[: HEADER_SIZE - 16])
    if computed != h["header_hash"]:
        return (
            f"header checksum mismatch: the header is damaged (stored {h['header_hash'].hex()}, "
            f"computed {computed.hex()})"
        )
    if h["pointer_size"] != POINTER_SIZE:
        return f"pointer size {h['pointer_size']} (this process has {POINTER_SIZE})"
    same_text = h["asyncvk_version"] == _version_field(__version__)
    if not same_text or h["asyncvk_version_hash"] != name_hash(__version__):
        written = h["asyncvk_version"].rstrip(b"\0").decode("utf-8", "replace")
        return f"asyncvk version: written by asyncvk {written}, this is asyncvk {__version__}"
    if expected is not None:
        return _identity_mismatch(h, expected) or h
    return h


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


def _body_problem(body: memoryview) -> str | None:
    size = len(body)
    if size == 0 or size % 4:
        return f"SPIR-V size {size} is not a positive multiple of 4"
    first = int.from_bytes(body[:4], "little")
    if first != SPIRV_MAGIC:
        return f"not SPIR-V: first word 0x{first:08x}, expected magic 0x{SPIRV_MAGIC:08x}"
    return None


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
) -> tuple[CacheLoadResult, CacheContents | None]:
    """Validate and decode a cache file; never raises for bad content.

    :param expected: the identity the file must match; None accepts any (``cache inspect``).
    :param source_hashes: shader name -> current source hash; an entry whose shader is absent
        or whose hash differs is skipped. None keeps every well-formed entry.
    :returns: (falsy result with the reason, None) when the whole file is rejected, else
        (result with per-entry skips, contents). Nothing is returned before every check passed.
    """
    view = memoryview(data).cast("B")
    h = _check_header(view, expected)
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
        key = rec.key
        if problem is not None or key is None:
            skipped.append(f"{rec.label}: {problem}")
        else:
            entries[key] = bytes(rec.body)
    result = CacheLoadResult(True, "loaded", len(entries), len(skipped), tuple(skipped))
    return result, CacheContents(identity, entries, bytes(sections.blob))


# -- reading ---------------------------------------------------------------------------------


def _too_big(what: str, size: int, max_size: int) -> CacheLoadResult:
    return CacheLoadResult(False, f"{what} has {size} bytes, over the {max_size}-byte size limit")


def _read_path(path: str, max_size: int) -> bytes | CacheLoadResult:
    # O_NONBLOCK: opening a FIFO must not hang; fstat then refuses anything but a regular file.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            return CacheLoadResult(False, f"{path} is a directory, not a cache file")
        if not stat.S_ISREG(st.st_mode):
            return CacheLoadResult(False, f"{path} is not a regular file")
        if st.st_size > max_size:
            return _too_big(path, st.st_size, max_size)
        chunks = []
        total = 0
        while total <= max_size:
            chunk = os.read(fd, min(max_size + 1 - total, 16 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    if total > max_size:
        return CacheLoadResult(False, f"{path} grew past the {max_size}-byte size limit")
    return b"".join(chunks)


def _read_stream(source: BinaryIO, max_size: int) -> bytes | CacheLoadResult:
    try:
        st = os.fstat(source.fileno())
        remaining = st.st_size - source.tell()
        if stat.S_ISREG(st.st_mode) and remaining > max_size:
            return _too_big("the cache file object", remaining, max_size)
    except (OSError, ValueError, AttributeError):
        pass  # no file descriptor (BytesIO, sockets): the bounded read below still applies
    data = source.read(max_size + 1)
    if not isinstance(data, (bytes, bytearray)):
        return CacheLoadResult(False, "the cache file object is not open in binary mode")
    if len(data) > max_size:
        return CacheLoadResult(False, f"the cache file object is over the {max_size}-byte limit")
    return bytes(data)


def read_cache_source(
    source: str | os.PathLike[str] | bytes | bytearray | memoryview | BinaryIO,
    *,
    max_size: int = MAX_FILE_SIZE,
) -> bytes | CacheLoadResult:
    """The bytes of a cache file, or a failed result saying why they cannot be had.

    ``bytes`` are the file's contents, not a path. A file's size is checked with ``fstat``
    before anything is read, so a huge (or sparse) file costs nothing.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        if len(source) > max_size:
            return _too_big("the cache data", len(source), max_size)
        return bytes(source)
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        try:
            return _read_path(os.fsdecode(path), max_size)
        except FileNotFoundError:
            return CacheLoadResult(False, f"{path} does not exist")
        except PermissionError as exc:
            return CacheLoadResult(False, f"cannot read {path}: {exc.strerror} (permission)")
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            return CacheLoadResult(False, f"cannot read {path}: {reason}")
    try:
        return _read_stream(source, max_size)
    except (OSError, ValueError) as exc:
        return CacheLoadResult(False, f"cannot read the cache file object: {exc}")


# -- inspection ------------------------------------------------------------------------------


def _jsonable_header(h: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field, value in h.items():
        if field == "magic":
            out[field] = value.decode("latin-1")
        elif field == "endian":
            out[field] = f"0x{value:08x}"
        elif field == "asyncvk_version":
            out[field] = value.rstrip(b"\0").decode("utf-8", "replace")
        elif isinstance(value, bytes):
            out[field] = value.hex()
        elif field.endswith("_hash"):
            out[field] = f"{value:016x}"
        else:
            out[field] = value
    return out


def describe_cache(data: bytes) -> dict[str, Any]:
    """Header fields, section layout and every entry, JSON-ready (``asyncvk cache inspect``).

    Describes damaged files too, as far as they can be read; raises ValueError only when the
    data has no header of this format version to describe.
    """
    view = memoryview(data).cast("B")
    problem = _check_prefix(view)
    if problem is not None:
        raise ValueError(problem)
    h = _unpack_header(view)
    result, _ = decode_cache(data, expected=None, source_hashes=None)
    info: dict[str, Any] = {
        "size": len(view),
        "valid": bool(result),
        "reason": result.reason,
        "header": _jsonable_header(h),
        "layout": {},
        "spirv_entries": [],
        "skipped": list(result.skipped),
        "driver_blob_bytes": h["driver_blob_size"],
    }
    start = 0
    for section, size in (
        ("header", HEADER_SIZE),
        ("spirv_index", h["index_size"]),
        ("spirv_bodies", h["bodies_size"]),
        ("driver_blob", h["driver_blob_size"]),
    ):
        info["layout"][section] = [start, start + size]
        start += size
    sections = _check_sections(view, h)
    records = _parse_index(h, sections) if isinstance(sections, _Sections) else []
    if isinstance(records, str):
        records = []
    for rec, problem in zip(records, _judge(records, None), strict=True):
        info["spirv_entries"].append(
            {
                "shader": rec.name,
                "option_bits": rec.option_bits,
                "source_hash": f"{rec.source_hash:016x}",
                "macro_hash": f"{rec.macro_hash:016x}",
                "size": len(rec.body),
                "entry_hash": rec.digest.hex(),
                "status": problem or "ok",
            }
        )
    return info
