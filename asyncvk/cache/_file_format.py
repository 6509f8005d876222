"""The persistent cache file: its layout, encoding, and a validation that can only ever miss.

Layout (little-endian, no padding; ``docs/cache-format.md`` is the full description)::

    header       fixed struct; identity, section sizes and hashes, the cache key's id; its MAC
                 (keyed blake2b) at the end
    SPIR-V index one record per entry: key, body size, entry hash     (hashed in the header)
    SPIR-V bodies the words of each entry, in index order             (key + body in its record)
    driver blob  vkGetPipelineCacheData output; the file ends here     (hashed in the header)

Every byte is covered by a checksum, and the header's checksum is a MAC with this user's cache
key (``_cache_key``): the header holds the hashes of everything else, so a file someone changed
without the key fails as a whole, checksums recomputed or not. The header and the index frame
the file, so damage there
rejects the whole file; a body only carries words, so a damaged or outdated body is skipped
alone and the rest of the file is still used. An entry's hash covers its key as well as its
body, so a body that ends up under another key (a writer's bug, two bodies exchanged) fails it.
This module holds the layout, the writer and the header's checks; ``_file_entries`` decodes a
whole file (sections, the SPIR-V index and bodies) and ``_file_inspect`` reads sources and
describes files. Their public names are importable from here as well.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .._version import __version__
from ..gpu._identity import DeviceIdentity, name_hash
from ._cache_key import CacheKey, local_cache_key
from ._keys import SpirvKey

MAGIC = b"AVKPCACH"
FORMAT_VERSION = 4
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
    ("key_id", "16s"),
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
    "encode_cache",
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


def _body_problem(body: memoryview) -> str | None:
    size = len(body)
    if size == 0 or size % 4:
        return f"SPIR-V size {size} is not a positive multiple of 4"
    first = int.from_bytes(body[:4], "little")
    if first != SPIRV_MAGIC:
        return f"not SPIR-V: first word 0x{first:08x}, expected magic 0x{SPIRV_MAGIC:08x}"
    return None


def encode_cache(contents: CacheContents, *, cache_key: CacheKey | None = None) -> bytes:
    """Serialise ``contents``, sealed with ``cache_key`` (default: this user's key); raises
    ValueError for anything the reader would refuse, or when there is no key to use.

    Entries are written in key order, so equal contents always give equal bytes.
    """
    cache_key = local_cache_key() if cache_key is None else cache_key
    if cache_key.problem is not None:
        raise ValueError(cache_key.problem)
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
    return _encode(contents.identity, entries, contents.driver_blob, cache_key=cache_key)


def _encode(
    identity: DeviceIdentity,
    entries: Iterable[tuple[SpirvKey, bytes]],
    blob: bytes,
    *,
    version: str = __version__,
    cache_key: CacheKey | None = None,
) -> bytes:
    """The raw writer, without checks: tests use it to build files the reader must refuse."""
    sealer = local_cache_key() if cache_key is None else cache_key
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
        "key_id": sealer.key_id,
        "header_hash": bytes(16),
    }
    unsealed = _HEADER.pack(*(values[name] for name in HEADER_FIELDS))
    values["header_hash"] = sealer.mac(unsealed[:-16])
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
    """Why a header's identity is not this device (``DeviceIdentity.mismatch``), or None."""
    differs = ident.mismatch(h)
    if differs is None:
        return None
    field, got, want = differs
    return (
        f"written for another GPU or driver: {field} is {got} in the file, this device has {want}"
    )


def _check_header(
    data: memoryview, expected: DeviceIdentity | None, cache_key: CacheKey | None = None
) -> dict[str, Any] | str:
    """The header's fields, or why the file is rejected on them alone: damaged, not sealed
    with ``cache_key`` (default: this user's), or written for another device or asyncvk."""
    problem = _check_prefix(data)
    if problem is not None:
        return problem
    key = local_cache_key() if cache_key is None else cache_key
    if key.problem is not None:
        return key.problem
    h = _unpack_header(data)
    if h["key_id"] != key.key_id:
        return (
            f"written with another cache key (key {h['key_id'].hex()[:12]} in the file, this "
            f"process uses {key.describe()}): not trusted. A file built elsewhere is used only "
            "where both share a deployment key (ASYNCVK_CACHE_KEY)"
        )
    computed = key.mac(data[: HEADER_SIZE - 16])
    if computed != h["header_hash"]:
        return (
            "header authentication failed: the file was changed by someone without this "
            "user's cache key, or damaged"
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
