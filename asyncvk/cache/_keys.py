"""SpirvKey: the key of a compiled builtin shader, in memory and in cache files."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class SpirvKey:
    """(shader name, option bits, source hash, device-macro hash).

    Local size and specializations are not part of it: they are specialization constants
    applied at pipeline creation, so one SPIR-V serves every pipeline of a shader.
    """

    shader: str
    option_bits: int
    source_hash: int
    macro_hash: int


def split_by_macros(
    entries: Mapping[SpirvKey, bytes], macro_hash: int
) -> tuple[dict[SpirvKey, bytes], dict[SpirvKey, bytes]]:
    """(entries compiled for these device macros, the others): the one place they are told apart."""
    mine: dict[SpirvKey, bytes] = {}
    others: dict[SpirvKey, bytes] = {}
    for key, spirv in entries.items():
        (mine if key.macro_hash == macro_hash else others)[key] = spirv
    return mine, others
