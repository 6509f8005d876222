"""PipelineSpec: everything that names one pipeline, declared by layers, built by the cache."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..gpu._pipeline import SpecValue
from ..shader._options import ShaderOptions


@dataclass(frozen=True, eq=False)
class PipelineSpec:
    """One pipeline: a builtin shader (or raw SPIR-V), its constants and its local size.

    Equal specs are one pipeline: ``PipelineCache.request_many`` builds each once. Equality
    keeps ``1``, ``1.0``, ``True`` and ``-0.0`` apart, as the digest does.

    Arguments:
        shader: a builtin shader name (a ``<name>@shapes`` variant with ``baked_push``), or
            with ``spirv`` only the name build logs show.
        specializations: values of the shader's specialization constants, in id order.
        local_size: the workgroup size.
        options: the option bits it is compiled with (switched off where the device lacks them).
        subgroup_size: a required subgroup size (0: the driver's choice).
        baked_push: for a shape variant, the push-constant bytes its baked constants take.
        spirv: raw SPIR-V words instead of a builtin shader (never stored in cache files).
    """

    shader: str
    specializations: tuple[SpecValue, ...] = ()
    local_size: tuple[int, int, int] = (64, 1, 1)
    options: ShaderOptions = field(default_factory=ShaderOptions)
    subgroup_size: int = 0
    baked_push: bytes | None = None
    spirv: bytes | None = None

    #: what equality compares, made once: a load looks its specs up a few thousand times
    _identity: tuple[object, ...] = field(init=False, repr=False)
    _hash: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "specializations", tuple(self.specializations))
        object.__setattr__(self, "local_size", tuple(int(n) for n in self.local_size))
        if self.baked_push is not None:
            object.__setattr__(self, "baked_push", bytes(self.baked_push))
        identity = (
            self.shader,
            tuple(map(repr, self.specializations)),
            self.local_size,
            self.options,
            self.subgroup_size,
            self.baked_push,
            self.spirv,
        )
        object.__setattr__(self, "_identity", identity)
        object.__setattr__(self, "_hash", hash(identity))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PipelineSpec):
            return NotImplemented
        return self is other or (self._hash == other._hash and self._identity == other._identity)

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[object, ...]:
        """Made again where unpickled: a string's hash differs from process to process."""
        fields = (self.shader, self.specializations, self.local_size, self.options)
        return (PipelineSpec, (*fields, self.subgroup_size, self.baked_push, self.spirv))
