"""Pipeline digests: the key of a live pipeline.

Builtin and raw-SPIR-V keys are hashed with different domain prefixes, so they live in separate
key spaces and can never collide (ncnn's can: its word 0 is a union of the two). blake2b-128 over
a canonical encoding replaces ncnn's pair of 32-bit hashes.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence

from ..gpu._pipeline import SpecValue, pack_specialization


def _digest(
    domain: bytes,
    identity: bytes,
    option_bits: int,
    local_size: Sequence[int],
    subgroup_size: int,
    specializations: Sequence[SpecValue],
    baked_push: bytes | None = None,
) -> bytes:
    h = hashlib.blake2b(digest_size=16, person=domain)
    h.update(struct.pack("<I", len(identity)))
    h.update(identity)
    h.update(struct.pack("<Q3II", option_bits, *(int(x) for x in local_size), subgroup_size))
    h.update(struct.pack("<I", len(specializations)))
    for value in specializations:
        # the type tag keeps int 1 and float 1.4e-45 (same bits) apart
        tag = b"b" if isinstance(value, bool) else b"i" if isinstance(value, int) else b"f"
        h.update(tag + pack_specialization(value))
    if baked_push is not None:  # shape-baked pipelines: one per distinct push-constant value
        h.update(b"p" + struct.pack("<I", len(baked_push)) + baked_push)
    return h.digest()


def builtin_digest(
    shader: str,
    option_bits: int,
    local_size: Sequence[int],
    subgroup_size: int,
    specializations: Sequence[SpecValue],
    baked_push: bytes | None = None,
) -> bytes:
    """Digest of a builtin shader request (``baked_push``: a shape variant's constant bytes)."""
    return _digest(
        b"avk-builtin",
        shader.encode(),
        option_bits,
        local_size,
        subgroup_size,
        specializations,
        baked_push,
    )


def spirv_digest(
    spirv: bytes,
    local_size: Sequence[int],
    subgroup_size: int,
    specializations: Sequence[SpecValue],
) -> bytes:
    """Digest of a raw SPIR-V request (keyed by a hash of the words)."""
    words = hashlib.blake2b(spirv, digest_size=32).digest()
    return _digest(b"avk-spirv", words, 0, local_size, subgroup_size, specializations)
