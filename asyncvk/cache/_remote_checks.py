"""The verdict on what the remote tier read: which values to use, and which to replace.

A pure function of the values read (it runs on a worker thread; the tier applies the verdict).
A value is used only when it passes every check of ``_remote_values`` and, for a builtin
shader, is the body the install compiled (:func:`install_digests`). One that fails (a bad tag,
not an envelope, not decodable, another type than a string, over ``max_value``, another body
than the install's) is a bad value of its own key, and of no other: remembered as the store
must still hold it for this process's push to replace it, or delete it where this process has
no value of its own. A value this load had no budget left to read is merely a miss.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

from ..gpu._identity import DeviceIdentity
from ..shader._options import ShaderOptions
from ._keys import SpirvKey
from ._remote_store import BadValue, Read, Unread
from ._remote_values import decode_blob_value, decode_spirv_value, key_space, spirv_value_key

if TYPE_CHECKING:
    from ..shader._registry import ShaderRegistry


def install_digests(registry: ShaderRegistry, keys: Iterable[SpirvKey]) -> dict[SpirvKey, str]:
    """The blake2b of the body the install compiled for each of ``keys`` that has one (a
    builtin shader of this source, for option bits a Net asks for, without device macros): the
    one SPIR-V a store's value can be checked against without a signing key."""
    from ..shader._packaged import packaged_digest

    digests = {}
    for key in keys:
        if key.shader not in registry:
            continue
        source = registry.get(key.shader)
        if source.source_hash != key.source_hash:
            continue
        try:
            options = ShaderOptions.from_bits(key.option_bits)
        except ValueError:
            continue
        digest = packaged_digest(key.shader, options, source.source)
        if digest is not None:
            digests[key] = digest
    return digests


def spirv_label(key: SpirvKey) -> str:
    """How a rejection names a SPIR-V entry (as the cache's own refusals do)."""
    return f"SPIR-V of {key.shader!r} [option bits 0x{key.option_bits:x}]"


@dataclass
class ReadVerdict:
    """What to do with the values one read returned."""

    #: SPIR-V entries to adopt, and what their values were (a refusal later replaces exactly it)
    spirv: dict[SpirvKey, bytes] = field(default_factory=dict)
    adopted: dict[SpirvKey, BadValue] = field(default_factory=dict)
    #: (blob key, blob) to merge into the driver cache
    blobs: list[tuple[str, bytes]] = field(default_factory=list)
    #: keys the store holds a good value for: this process must not write over them
    present: set[SpirvKey] = field(default_factory=set)
    #: store key -> the value there that failed a check, for the push to replace or delete
    bad: dict[str, BadValue] = field(default_factory=dict)
    #: store keys whose value passed (a bad value noted there before is gone)
    good: set[str] = field(default_factory=set)
    #: store keys read as holding nothing: absent, or an empty value (the push finds out)
    empty: set[str] = field(default_factory=set)
    #: (what, why) of each value refused
    rejected: list[tuple[str, str]] = field(default_factory=list)
    #: keys without a value (absent, expired, evicted)
    absent: int = 0
    #: values not read: the load's max_read was spent
    unread: int = 0
    bytes_read: int = 0

    def check(
        self, store_key: str, value: Read, limit: int, decode: Callable[[bytes], bytes | str]
    ) -> bytes | str | None:
        """The body of a value read under ``store_key``, why it is bad, or None where there
        was no value to judge (absent, or not read)."""
        if value is None:
            self.absent += 1
            self.empty.add(store_key)
            return None
        if value is Unread.OVER_BUDGET:
            self.unread += 1
            return None
        if value is Unread.WRONG_TYPE:
            self.bad[store_key] = BadValue.wrong_type()
            return value.value
        if value is Unread.TOO_LARGE:
            self.bad[store_key] = BadValue.over(limit)
            return f"{value.value} {limit}"
        assert isinstance(value, bytes)
        self.bytes_read += len(value)
        body = decode(value)
        if isinstance(body, str):
            self.bad[store_key] = BadValue.of(value)
        else:
            self.good.add(store_key)
        return body


def judge_values(
    keys: list[SpirvKey],
    values: list[Read],
    members: list[str],
    blob_values: list[Read],
    *,
    identity: DeviceIdentity,
    secret: bytes | None,
    source_hashes: Mapping[str, int],
    digests: Mapping[SpirvKey, str],
    limit: int,
) -> ReadVerdict:
    """The verdict on SPIR-V ``values`` read for ``keys`` and driver blobs read for ``members``
    (a value over ``limit`` bytes is refused undecoded; a builtin body must be the install's,
    as ``digests`` name it)."""
    from ..shader._packaged import body_digest

    verdict = ReadVerdict()
    space = key_space(secret)
    for key, value in zip(keys, values, strict=True):
        store_key = spirv_value_key(key, space)
        decode = partial(decode_spirv_value, key=key, secret=secret, source_hashes=source_hashes)
        body = verdict.check(store_key, value, limit, decode)
        if body is None:
            continue
        digest = digests.get(key)
        if isinstance(body, bytes) and digest is not None and body_digest(body) != digest:
            body = "not the SPIR-V the install compiled for this builtin shader"
            verdict.good.discard(store_key)
            assert isinstance(value, bytes)
            verdict.bad[store_key] = BadValue.of(value)
        if isinstance(body, str):
            verdict.rejected.append((spirv_label(key), body))
            continue
        assert isinstance(value, bytes)
        verdict.present.add(key)
        verdict.spirv[key] = body
        verdict.adopted[key] = BadValue.of(value)
    for member, value in zip(members, blob_values, strict=True):
        decode = partial(decode_blob_value, key=member, identity=identity, secret=secret)
        blob = verdict.check(member, value, limit, decode)
        if isinstance(blob, str):
            verdict.rejected.append((f"driver blob {member}", blob))
        elif blob is not None:
            verdict.blobs.append((member, blob))
    return verdict
