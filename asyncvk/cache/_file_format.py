"""The persistent cache file: layout, encoding, and validation that can only ever miss.

Layout (little-endian; ``docs/cache-format.md`` is the full description)::

    header      fixed struct, its own checksum in the last 16 bytes
    index       per SPIR-V entry: key, size, blake2b-128 of the words     (hashed in the header)
    bodies      the SPIR-V words of each entry, back to back             (each hashed in the index)
    driver blob vkGetPipelineCacheData output                            (hashed in the header)

The header and index are hashed as wholes, so framing damage rejects the file; each body has
its own hash in the index, so a damaged or outdated entry is skipped alone.
"""

from __future__ import annotations

import hashlib
import os
import stat
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from .._version import __version__
from ..gpu._identity import DeviceIdentity
from ._keys import SpirvKey

MAGIC = b"AVKPCACH"
FORMAT_VERSION = 1
ENDIAN_MARKER = 0x01020304
POINTER_SIZE = struct.calcsize("P")
MAX_FILE_SIZE = 256 << 20
SPIRV_MAGIC = 0x07230203

# magic, version, header size, endian, pointer size, asyncvk version (16 bytes, NUL padded),
# vendor, device, api, driver version, driver id, device name hash, driver name hash, uuid,
# entry count, index size, index hash, bodies size, blob size, blob hash, header hash
_HEADER = struct.Struct("<8sIIII16sIIIIIQQ16sIQ16sQQ16s16s")
HEADER_SIZE = _HEADER.size
_ENTRY = struct.Struct("<HIQQQ16s")  # name length, option bits, source hash, macro hash, size, hash

HEADER_FIELDS = (
    "magic",
    "format_version",
    "header_size",
    "endian",
    "pointer_size",
    "asyncvk_version",
    "vendor_id",
    "device_id",
    "api_version",
    "driver_version",
    "driver_id",
    "device_name_hash",
    "driver_name_hash",
    "pipeline_cache_uuid",
    "spirv_entry_count",
    "index_size",
    "index_hash",
    "bodies_size",
    "driver_blob_size",
    "driver_blob_hash",
    "header_hash",
)


def _hash16(data: bytes | memoryview) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


def name_hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")


@dataclass(frozen=True)
class CacheContents:
    identity: DeviceIdentity
    spirv: Mapping[SpirvKey, bytes]
    driver_blob: bytes


@dataclass(frozen=True)
class CacheLoadResult:
    """Truthy on success; otherwise ``reason`` says why the file was a miss."""

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


def _version_field() -> bytes:
    return __version__.encode()[:16].ljust(16, b"\0")


def encode_cache(contents: CacheContents) -> bytes:
    ident = contents.identity
    index = bytearray()
    bodies = bytearray()
    for key, spirv in sorted(
        contents.spirv.items(), key=lambda kv: (kv[0].shader, kv[0].option_bits)
    ):
        name = key.shader.encode()
        index += _ENTRY.pack(
            len(name), key.option_bits, key.source_hash, key.macro_hash, len(spirv), _hash16(spirv)
        )
        index += name
        bodies += spirv
    blob = contents.driver_blob
    fields = [
        MAGIC,
        FORMAT_VERSION,
        HEADER_SIZE,
        ENDIAN_MARKER,
        POINTER_SIZE,
        _version_field(),
        ident.vendor_id,
        ident.device_id,
        ident.api_version,
        ident.driver_version,
        ident.driver_id,
        name_hash(ident.device_name),
        name_hash(ident.driver_name),
        ident.pipeline_cache_uuid,
        len(contents.spirv),
        len(index),
        _hash16(index),
        len(bodies),
        len(blob),
        _hash16(blob) if blob else bytes(16),
    ]
    partial = _HEADER.pack(*fields, bytes(16))
    header = _HEADER.pack(*fields, _hash16(partial[:-16]))
    return header + bytes(index) + bytes(bodies) + blob


def _fail(reason: str) -> tuple[CacheLoadResult, None]:
    return CacheLoadResult(False, reason), None


def _header(data: bytes) -> dict[str, Any]:
    return dict(zip(HEADER_FIELDS, _HEADER.unpack_from(data, 0), strict=True))


def validate_driver_blob(blob: bytes, identity: DeviceIdentity) -> str | None:
    """Check ``VkPipelineCacheHeaderVersionOne``; None when acceptable (empty is fine)."""
    if not blob:
        return None
    if len(blob) < 32:
        return f"driver blob of {len(blob)} bytes is shorter than its 32-byte header"
    length, version, vendor, device = struct.unpack_from("<IIII", blob, 0)
    uuid = blob[16:32]
    if length < 32 or length > len(blob):
        return f"driver blob header length {length} is outside 32..{len(blob)}"
    if version != 1:
        return f"driver blob header version {version} (expected 1)"
    if vendor != identity.vendor_id or device != identity.device_id:
        return (
            f"driver blob is for vendor 0x{vendor:x} device 0x{device:x}, this device is "
            f"vendor 0x{identity.vendor_id:x} device 0x{identity.device_id:x}"
        )
    if uuid != identity.pipeline_cache_uuid:
        return "driver blob pipelineCacheUUID differs from this driver's"
    return None


def _identity_mismatch(h: dict[str, Any], ident: DeviceIdentity) -> str | None:
    checks = [
        ("vendor_id", ident.vendor_id),
        ("device_id", ident.device_id),
        ("api_version", ident.api_version),
        ("driver_version", ident.driver_version),
        ("driver_id", ident.driver_id),
        ("device_name_hash", name_hash(ident.device_name)),
        ("driver_name_hash", name_hash(ident.driver_name)),
        ("pipeline_cache_uuid", ident.pipeline_cache_uuid),
    ]
    for field, expected in checks:
        if h[field] != expected:
            got = h[field].hex() if isinstance(h[field], bytes) else h[field]
            want = expected.hex() if isinstance(expected, bytes) else expected
            return f"written for another GPU or driver: {field} is {got}, this device has {want}"
    return None


def decode_cache(
    data: bytes,
    *,
    expected: DeviceIdentity | None,
    source_hashes: Mapping[str, int] | None,
) -> tuple[CacheLoadResult, CacheContents | None]:
    """Validate and decode; a whole-file failure returns (falsy result, None)."""
    if len(data) == 0:
        return _fail("empty file")
    if len(data) < HEADER_SIZE:
        return _fail(f"truncated header: {len(data)} bytes, the header alone is {HEADER_SIZE}")
    h = _header(data)
    if h["magic"] != MAGIC:
        return _fail(f"bad magic {h['magic']!r} (expected {MAGIC!r})")
    if h["endian"] != ENDIAN_MARKER:
        return _fail(f"endian marker 0x{h['endian']:08x} (written on another byte order)")
    if h["format_version"] != FORMAT_VERSION:
        return _fail(f"format version {h['format_version']} (this asyncvk reads {FORMAT_VERSION})")
    if h["header_size"] != HEADER_SIZE:
        return _fail(f"header size {h['header_size']} (expected {HEADER_SIZE})")
    if _hash16(data[: HEADER_SIZE - 16]) != h["header_hash"]:
        return _fail("header checksum mismatch (the header is damaged)")
    if h["pointer_size"] != POINTER_SIZE:
        return _fail(f"pointer size {h['pointer_size']} (this process has {POINTER_SIZE})")
    if h["asyncvk_version"] != _version_field():
        written = h["asyncvk_version"].rstrip(b"\0").decode("utf-8", "replace")
        return _fail(f"written by asyncvk {written}, this is {__version__}")
    if expected is not None:
        mismatch = _identity_mismatch(h, expected)
        if mismatch:
            return _fail(mismatch)
    index_end = HEADER_SIZE + h["index_size"]
    bodies_end = index_end + h["bodies_size"]
    blob_end = bodies_end + h["driver_blob_size"]
    if blob_end > len(data):
        return _fail(
            f"declared sections end at byte {blob_end}, the file has {len(data)} "
            "(truncated or oversized section)"
        )
    if blob_end < len(data):
        return _fail(f"{len(data) - blob_end} trailing bytes after the driver blob")
    index = data[HEADER_SIZE:index_end]
    if _hash16(index) != h["index_hash"]:
        return _fail("SPIR-V index checksum mismatch")
    blob = data[bodies_end:blob_end]
    if blob and _hash16(blob) != h["driver_blob_hash"]:
        return _fail("driver blob checksum mismatch")
    if expected is not None:
        reason = validate_driver_blob(blob, expected)
        if reason:
            return _fail(reason)

    entries: dict[SpirvKey, bytes] = {}
    skipped: list[str] = []
    pos = 0
    body = index_end
    for i in range(h["spirv_entry_count"]):
        if pos + _ENTRY.size > len(index):
            return _fail(f"SPIR-V index ends inside entry {i}")
        name_len, bits, source, macro, size, digest = _ENTRY.unpack_from(index, pos)
        pos += _ENTRY.size
        if pos + name_len > len(index):
            return _fail(f"SPIR-V index ends inside the name of entry {i}")
        try:
            name = bytes(index[pos : pos + name_len]).decode("utf-8")
        except UnicodeDecodeError:
            return _fail(f"entry {i} has a name that is not UTF-8")
        pos += name_len
        if body + size > bodies_end:
            return _fail(f"entry {i} ({name}) runs past the SPIR-V section")
        spirv = data[body : body + size]
        body += size
        key = SpirvKey(name, bits, source, macro)
        if size == 0 or size % 4:
            skipped.append(f"{name}: SPIR-V size {size} is not a positive multiple of 4")
        elif _hash16(spirv) != digest:
            skipped.append(f"{name}: SPIR-V checksum mismatch")
        elif int.from_bytes(spirv[:4], "little") != SPIRV_MAGIC:
            skipped.append(f"{name}: not SPIR-V (bad magic)")
        elif source_hashes is not None and name not in source_hashes:
            skipped.append(f"{name}: unknown shader")
        elif source_hashes is not None and source_hashes[name] != source:
            skipped.append(f"{name}: shader source changed since the file was written")
        elif key in entries:
            skipped.append(f"{name}: duplicate entry")
        else:
            entries[key] = bytes(spirv)
    if pos != len(index):
        return _fail(f"{len(index) - pos} unexplained bytes in the SPIR-V index")
    if body != bodies_end:
        return _fail("SPIR-V entry sizes do not add up to the SPIR-V section size")
    identity = expected or DeviceIdentity(
        h["vendor_id"],
        h["device_id"],
        h["api_version"],
        h["driver_version"],
        h["driver_id"],
        "",
        "",
        h["pipeline_cache_uuid"],
    )
    result = CacheLoadResult(True, "loaded", len(entries), len(skipped), tuple(skipped))
    return result, CacheContents(identity, entries, bytes(blob))


def read_cache_source(
    source: str | os.PathLike[str] | bytes | BinaryIO, *, max_size: int = MAX_FILE_SIZE
) -> bytes | CacheLoadResult:
    """The bytes of a cache file, or a failed result; sizes are checked before reading."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        if len(source) > max_size:
            return CacheLoadResult(False, f"{len(source)} bytes is over the {max_size} limit")
        return bytes(source)
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                if stat.S_ISDIR(st.st_mode):
                    return CacheLoadResult(False, f"{path} is a directory")
                if st.st_size > max_size:
                    return CacheLoadResult(
                        False, f"{path} has {st.st_size} bytes, over the {max_size}-byte limit"
                    )
                data = f.read(max_size + 1)
        except IsADirectoryError:
            return CacheLoadResult(False, f"{path} is a directory")
        except FileNotFoundError:
            return CacheLoadResult(False, f"{path} does not exist")
        except OSError as exc:
            return CacheLoadResult(False, f"cannot read {path}: {exc.strerror or exc}")
        if len(data) > max_size:
            return CacheLoadResult(False, f"{path} grew past the {max_size}-byte limit")
        return data
    try:
        data = source.read(max_size + 1)
    except OSError as exc:
        return CacheLoadResult(False, f"cannot read the cache file object: {exc}")
    if len(data) > max_size:
        return CacheLoadResult(False, f"file object is over the {max_size}-byte limit")
    return bytes(data)


def describe_cache(data: bytes) -> dict[str, Any]:
    """Header fields and entries, JSON-ready (for ``asyncvk cache inspect``)."""
    if len(data) < HEADER_SIZE:
        raise ValueError(f"{len(data)} bytes: shorter than the {HEADER_SIZE}-byte header")
    h = _header(data)
    header = {
        k: (v.hex() if isinstance(v, bytes) and k not in ("magic", "asyncvk_version") else v)
        for k, v in h.items()
    }
    header["magic"] = h["magic"].decode("latin-1")
    header["asyncvk_version"] = h["asyncvk_version"].rstrip(b"\0").decode("utf-8", "replace")
    result, contents = decode_cache(data, expected=None, source_hashes=None)
    entries = []
    if contents is not None:
        entries = [
            {
                "shader": k.shader,
                "option_bits": k.option_bits,
                "source_hash": f"{k.source_hash:016x}",
                "macro_hash": f"{k.macro_hash:016x}",
                "size": len(v),
            }
            for k, v in contents.spirv.items()
        ]
    return {
        "size": len(data),
        "valid": bool(result),
        "reason": result.reason,
        "header": header,
        "spirv_entries": entries,
        "skipped": list(result.skipped),
        "driver_blob_bytes": h["driver_blob_size"],
    }
