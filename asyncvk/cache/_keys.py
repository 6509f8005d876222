"""SpirvKey: the key of a compiled builtin shader, in memory and in cache files."""

from __future__ import annotations

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
