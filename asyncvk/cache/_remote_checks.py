"""The verdict on what the remote tier read: which values to use, and which to replace.

A pure function of the values read (it runs on a worker thread; the tier applies the verdict).
A value is used only when it passes every check of ``_remote_values``. One that fails is
remembered by length and SHA-1, so that this process's push replaces exactly those bytes; one
merely larger than this reader's ``max_value`` is left alone, as a reader with a larger cap
may use it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial

from ..gpu._identity import DeviceIdentity
from ._keys import SpirvKey
from ._remote_store import BadValue
from ._remote_values import decode_blob_value, decode_spirv_value, spirv_value_key


@dataclass
class ReadVerdict:
    """What to do with the values one read returned."""

    #: SPIR-V entries to adopt
    spirv: dict[SpirvKey, bytes] = field(default_factory=dict)
    #: (blob key, blob) to merge into the driver cache
    blobs: list[tuple[str, bytes]] = field(default_factory=list)
    #: keys the store holds a value for that this process must not write over
    present: set[SpirvKey] = field(default_factory=set)
    #: store key -> the value there that failed a check, for the push to replace
    bad: dict[str, BadValue] = field(default_factory=dict)
    #: store keys whose value passed (a bad value noted there before is gone)
    good: set[str] = field(default_factory=set)
    #: (what, why) of each value refused
    rejected: list[tuple[str, str]] = field(default_factory=list)
    #: keys without a value (absent, expired, evicted)
    absent: int = 0
    bytes_read: int = 0

    def check(
        self, store_key: str, value: bytes, limit: int, decode: Callable[[bytes], bytes | str]
    ) -> bytes | str:
        """The body of a value read under ``store_key``, or why it is not used."""
        self.bytes_read += len(value)
        if len(value) > limit:  # only limit + 1 bytes of it were read
            return f"{len(value)} bytes, over max_value {limit}"
        body = decode(value)
        if isinstance(body, str):
            self.bad[store_key] = BadValue.of(value)
        else:
            self.good.add(store_key)
        return body


def judge_values(
    keys: list[SpirvKey],
    values: list[bytes | None],
    members: list[str],
    blob_values: list[bytes | None],
    *,
    identity: DeviceIdentity,
    secret: bytes | None,
    source_hashes: Mapping[str, int],
    limit: int,
) -> ReadVerdict:
    """The verdict on SPIR-V ``values`` read for ``keys`` and driver blobs read for ``members``
    (a value over ``limit`` bytes is refused undecoded)."""
    verdict = ReadVerdict()
    for key, value in zip(keys, values, strict=True):
        if value is None:
            verdict.absent += 1
            continue
        store_key = spirv_value_key(key)
        decode = partial(decode_spirv_value, key=key, secret=secret, source_hashes=source_hashes)
        body = verdict.check(store_key, value, limit, decode)
        if store_key not in verdict.bad:  # there, and not this process's to write over
            verdict.present.add(key)
        if isinstance(body, str):
            what = f"SPIR-V of {key.shader!r} [option bits 0x{key.option_bits:x}]"
            verdict.rejected.append((what, body))
        else:
            verdict.spirv[key] = body
    for member, value in zip(members, blob_values, strict=True):
        if value is None:  # expired or evicted since it was listed
            verdict.absent += 1
            continue
        decode = partial(decode_blob_value, key=member, identity=identity, secret=secret)
        blob = verdict.check(member, value, limit, decode)
        if isinstance(blob, str):
            verdict.rejected.append((f"driver blob {member}", blob))
        else:
            verdict.blobs.append((member, blob))
    return verdict
