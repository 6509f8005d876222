"""What the remote cache tier stores: its keys, and each value as a sealed cache file.

Content addressing: a SPIR-V entry lives under its cache key (shader, option bits, source
hash, device-macro hash), a driver blob under its device identity (vendor, device, driver
version, pipeline cache UUID) and its own content hash, listed in a per-identity set of blob
keys. Keys start with the cache format and asyncvk versions, so releases never read each
other's values, then with the signing key's id (``unsigned`` without one): fleets with
different keys never read, replace or delete each other's values, so a process with a wrong
key can neither use a fleet's values nor write over them.

A value is an envelope around a cache file in the format of ``_file_format``::

    magic "AVKREMOT" | envelope version u16 | kind u8 | flags u8 | key length u32
    key (the key the value was written under, UTF-8) | cache file | tag (32 bytes)

The cache file carries the checksums and identity a local file carries, and is decoded by the
same reader (``decode_cache``), so a remote value passes exactly the checks a file does.
The key inside binds a value to its key (and so to its namespace): a value copied under
another key is refused. The tag is HMAC-SHA256 over everything before it with a shared secret;
a process with a secret accepts only values whose tag matches, one without accepts only
unsigned values whose tag is all zeros (any other tag was changed after the write).
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Mapping

from .._version import __version__
from ..gpu._identity import DeviceIdentity
from ._cache_key import UNKEYED
from ._file_entries import decode_cache
from ._file_format import FORMAT_VERSION, CacheContents, encode_cache
from ._keys import SpirvKey

MAGIC = b"AVKREMOT"
ENVELOPE_VERSION = 1
KIND_SPIRV = 1
KIND_DRIVER_BLOB = 2
_KIND_NAMES = {KIND_SPIRV: "SPIR-V entry", KIND_DRIVER_BLOB: "driver blob"}
_SIGNED = 1
_HEAD = struct.Struct("<8sHBBI")
_TAG_SIZE = 32


UNSIGNED_SPACE = "unsigned"
_KEY_ID_LABEL = b"asyncvk remote cache key id"


def key_space(secret: bytes | None) -> str:
    """The namespace of the values a signing key writes: ``k`` and 16 hex digits of an HMAC
    of a fixed label, or ``unsigned``. An HMAC, not the key: the id tells nothing a value's tag
    does not already tell."""
    if not secret:
        return UNSIGNED_SPACE
    return "k" + hmac.new(secret, _KEY_ID_LABEL, hashlib.sha256).hexdigest()[:16]


def namespace(space: str) -> str:
    """The prefix of every key: this cache format, this asyncvk, and the signing key's id."""
    return f"asyncvk:f{FORMAT_VERSION}:{__version__}:{space}:"


def spirv_value_key(key: SpirvKey, space: str) -> str:
    """Where a SPIR-V entry lives; the device-macro hash first, so one device's can be listed."""
    return (
        f"{namespace(space)}spirv:{key.macro_hash:016x}:{key.shader}:{key.option_bits:x}:"
        f"{key.source_hash:016x}"
    )


def parse_spirv_value_key(name: str, space: str) -> SpirvKey | None:
    """The SpirvKey a store key names (:func:`spirv_value_key` read back), None if none."""
    prefix = f"{namespace(space)}spirv:"
    if not name.startswith(prefix):
        return None
    macro, _, rest = name[len(prefix) :].partition(":")
    shader, _, tail = rest.rpartition(":")
    shader, _, bits = shader.rpartition(":")
    try:
        key = SpirvKey(shader, int(bits, 16), int(tail, 16), int(macro, 16))
    except ValueError:
        return None
    return key if shader and spirv_value_key(key, space) == name else None


def spirv_pattern(macro_hash: int, space: str) -> str:
    """A glob for every SPIR-V entry compiled for these device macros."""
    return f"{namespace(space)}spirv:{macro_hash:016x}:*"


def _device_part(identity: DeviceIdentity) -> str:
    return (
        f"{identity.vendor_id:04x}:{identity.device_id:04x}:{identity.driver_version:x}:"
        f"{identity.pipeline_cache_uuid.hex()}"
    )


def blob_index_key(identity: DeviceIdentity, space: str) -> str:
    """The set of the driver blob keys written for this device identity."""
    return f"{namespace(space)}blobs:{_device_part(identity)}"


def blob_value_key(identity: DeviceIdentity, blob: bytes, space: str) -> str:
    """Where one driver blob lives: its identity and its own content hash, so two writers
    never write one key with different contents."""
    digest = hashlib.blake2b(blob, digest_size=16).hexdigest()
    return f"{_blob_prefix(identity, space)}{digest}"


def _blob_prefix(identity: DeviceIdentity, space: str) -> str:
    return f"{namespace(space)}blob:{_device_part(identity)}:"


def is_blob_key(name: str, identity: DeviceIdentity, space: str) -> bool:
    """Whether a name listed in the identity's set is a blob key of this identity and
    namespace. Nothing else listed there is read, replaced or deleted: whoever can write the
    set could list any key of the database."""
    prefix = _blob_prefix(identity, space)
    digest = name[len(prefix) :]
    return (
        name.startswith(prefix)
        and len(digest) == 32
        and all(c in "0123456789abcdef" for c in digest)
    )


# -- the envelope ------------------------------------------------------------------------------


def seal(kind: int, key: str, payload: bytes, secret: bytes | None) -> bytes:
    """Wrap ``payload`` for ``key``; signed when a ``secret`` is given."""
    raw_key = key.encode()
    flags = _SIGNED if secret else 0
    body = _HEAD.pack(MAGIC, ENVELOPE_VERSION, kind, flags, len(raw_key)) + raw_key + payload
    tag = hmac.new(secret, body, hashlib.sha256).digest() if secret else bytes(_TAG_SIZE)
    return body + tag


def unseal(value: bytes, kind: int, key: str, secret: bytes | None) -> bytes | str:
    """The payload of a value read under ``key``, or why it must not be used."""
    if len(value) < _HEAD.size + _TAG_SIZE:
        return f"{len(value)} bytes: too short to be an asyncvk remote cache value"
    magic, version, got_kind, flags, key_size = _HEAD.unpack_from(value, 0)
    if magic != MAGIC:
        return f"bad magic {magic!r}: not an asyncvk remote cache value"
    if version != ENVELOPE_VERSION:
        return f"envelope version {version} (this asyncvk reads {ENVELOPE_VERSION})"
    if got_kind != kind:
        got = _KIND_NAMES.get(got_kind, f"kind {got_kind}")
        return f"holds a {got}, expected a {_KIND_NAMES[kind]}"
    end = _HEAD.size + key_size
    if end > len(value) - _TAG_SIZE:
        return f"key length {key_size} runs past the end of the value"
    if value[_HEAD.size : end] != key.encode():
        return "written under another key (the key inside the value differs)"
    if flags & ~_SIGNED:
        return f"unknown flags 0x{flags:02x}"
    body, tag = value[:-_TAG_SIZE], value[-_TAG_SIZE:]
    if secret:
        if not flags & _SIGNED:
            return "not signed, and this process accepts only signed values"
        expected = hmac.new(secret, body, hashlib.sha256).digest()
        if not hmac.compare_digest(tag, expected):
            return "signature mismatch: written with another key, or altered"
    elif flags & _SIGNED:
        return "signed, and this process has no key to check it"
    elif tag != bytes(_TAG_SIZE):
        return "an unsigned value whose tag is not zeros: altered"
    return bytes(value[end:-_TAG_SIZE])


# -- SPIR-V entries and driver blobs -------------------------------------------------------------


def encode_spirv_value(
    key: SpirvKey, spirv: bytes, identity: DeviceIdentity, secret: bytes | None
) -> bytes:
    """One SPIR-V entry as a sealed cache file (``encode_cache`` refuses a body that is not
    SPIR-V, as it would in a file)."""
    payload = encode_cache(CacheContents(identity, {key: spirv}, b""), cache_key=UNKEYED)
    return seal(KIND_SPIRV, spirv_value_key(key, key_space(secret)), payload, secret)


def decode_spirv_value(
    value: bytes,
    key: SpirvKey,
    secret: bytes | None,
    source_hashes: Mapping[str, int],
) -> bytes | str:
    """The SPIR-V body stored for ``key``, or why the value is a miss.

    The file inside is read as a file is, without a device identity (SPIR-V depends on the
    device only through the macro hash, which is part of the key).
    """
    payload = unseal(value, KIND_SPIRV, spirv_value_key(key, key_space(secret)), secret)
    if isinstance(payload, str):
        return payload
    result, contents = decode_cache(
        payload, expected=None, source_hashes=source_hashes, cache_key=UNKEYED
    )
    if not result or contents is None:
        return result.reason
    if result.skipped:
        return result.skipped[0]
    if contents.driver_blob or set(contents.spirv) != {key}:
        return "does not hold exactly the SPIR-V entry of its key"
    return contents.spirv[key]


def encode_blob_value(
    blob: bytes, identity: DeviceIdentity, secret: bytes | None
) -> tuple[str, bytes]:
    """(its key, the sealed value) for a driver blob of ``identity``."""
    key = blob_value_key(identity, blob, key_space(secret))
    payload = encode_cache(CacheContents(identity, {}, blob), cache_key=UNKEYED)
    return key, seal(KIND_DRIVER_BLOB, key, payload, secret)


def decode_blob_value(
    value: bytes, key: str, identity: DeviceIdentity, secret: bytes | None
) -> bytes | str:
    """The driver blob stored under ``key`` if it is whole and for this device, else why not.

    The file inside must match ``identity`` field by field and its blob must pass the header
    and checksum checks a file's blob does, so a blob that reaches the driver is one this
    device and driver wrote.
    """
    space = key_space(secret)
    if not is_blob_key(key, identity, space):
        return "listed for another device identity, or not a driver blob key"
    payload = unseal(value, KIND_DRIVER_BLOB, key, secret)
    if isinstance(payload, str):
        return payload
    result, contents = decode_cache(
        payload, expected=identity, source_hashes=None, cache_key=UNKEYED
    )
    if not result or contents is None:
        return result.reason
    if contents.spirv or not contents.driver_blob:
        return "does not hold exactly one driver blob"
    if blob_value_key(identity, contents.driver_blob, space) != key:
        return "the blob's content hash differs from its key"
    return contents.driver_blob
