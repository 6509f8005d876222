"""SPIR-V reflection without external tools: what a pipeline layout needs from a shader.

``_spirv_decode`` reads the instruction stream once into tables; this module interprets them:
the entry points, descriptor bindings, the push-constant block size, specialization constant
ids and the declared local size. Any malformed input raises SpirvError naming the word offset,
never an IndexError; so does a module whose functions are cut short (a truncated body), which
some drivers crash on instead of refusing.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import SpirvError
from ._spirv_decode import (
    BUILTIN_WORKGROUP_SIZE,
    DEC_ARRAY_STRIDE,
    DEC_BINDING,
    DEC_BUFFER_BLOCK,
    DEC_BUILTIN,
    DEC_DESCRIPTOR_SET,
    DEC_SPEC_ID,
    OP_SPEC_CONSTANT_COMPOSITE,
    OP_TYPE_ARRAY,
    OP_TYPE_BOOL,
    OP_TYPE_FLOAT,
    OP_TYPE_IMAGE,
    OP_TYPE_INT,
    OP_TYPE_MATRIX,
    OP_TYPE_POINTER,
    OP_TYPE_RUNTIME_ARRAY,
    OP_TYPE_SAMPLED_IMAGE,
    OP_TYPE_STRUCT,
    OP_TYPE_VECTOR,
    SC_PUSH_CONSTANT,
    SC_STORAGE_BUFFER,
    SC_UNIFORM,
    SC_UNIFORM_CONSTANT,
    SpirvModule,
    decode_spirv,
)

#: Execution model of compute shaders (``OpEntryPoint GLCompute``).
GL_COMPUTE = 5

STORAGE_BUFFER = "storage_buffer"
UNIFORM_BUFFER = "uniform_buffer"
STORAGE_IMAGE = "storage_image"
SAMPLED_IMAGE = "sampled_image"
COMBINED_IMAGE_SAMPLER = "combined_image_sampler"


@dataclass(frozen=True)
class Binding:
    set: int
    binding: int
    descriptor_type: str


@dataclass(frozen=True)
class EntryPoint:
    #: SPIR-V execution model (5 = GLCompute).
    model: int
    name: str


@dataclass(frozen=True)
class ShaderInfo:
    """What a shader declares, as a pipeline layout and a dispatch need it."""

    bindings: tuple[Binding, ...]
    push_constant_size: int
    specialization_ids: tuple[int, ...]
    local_size: tuple[int, int, int]
    #: Spec ids that set the local size (``local_size_x_id = ...``), or None when fixed.
    local_size_ids: tuple[int, int, int] | None
    #: The module's entry points, in order (a compiled compute shader has one: GLCompute main).
    entry_points: tuple[EntryPoint, ...] = ()

    @property
    def binding_count(self) -> int:
        return len(self.bindings)

    @property
    def user_specialization_ids(self) -> tuple[int, ...]:
        """Specialization ids that are not the local size."""
        skip = set(self.local_size_ids or ())
        return tuple(i for i in self.specialization_ids if i not in skip)


def reflect_spirv(spirv: bytes) -> ShaderInfo:
    """Parse SPIR-V bytes into a ShaderInfo."""
    module = decode_spirv(spirv)
    bindings, push_size = _bindings_and_push_size(module)
    local_size, local_size_ids = _local_size(module)
    return ShaderInfo(
        bindings=tuple(sorted(bindings, key=lambda b: (b.set, b.binding))),
        push_constant_size=push_size,
        specialization_ids=tuple(sorted(set(module.spec_ids))),
        local_size=local_size,
        local_size_ids=local_size_ids,
        entry_points=tuple(EntryPoint(model, name) for model, _, name in module.entry_points),
    )


# -- interpretation pass -----------------------------------------------------------------------


def _size_of(module: SpirvModule, type_id: int, depth: int = 0) -> int:
    """Bytes a push-constant member of ``type_id`` spans (explicit offsets and strides win)."""
    if depth > 32 or type_id not in module.types:
        raise SpirvError(f"push constant member type {type_id} cannot be sized")
    op, args = module.types[type_id]
    if op in (OP_TYPE_INT, OP_TYPE_FLOAT):
        return args[0] // 8
    if op == OP_TYPE_BOOL:
        return 4
    if op in (OP_TYPE_VECTOR, OP_TYPE_MATRIX):
        return _size_of(module, args[0], depth + 1) * args[1]
    if op == OP_TYPE_ARRAY:
        stride = module.decorations.get(type_id, {}).get(DEC_ARRAY_STRIDE)
        length = module.constants.get(args[1])
        if length is None:
            raise SpirvError(f"array length id {args[1]} is not a constant")
        return (stride or _size_of(module, args[0], depth + 1)) * length
    if op == OP_TYPE_STRUCT:
        offsets = module.member_offsets.get(type_id, {})
        end = 0
        for m, member_type in enumerate(args):
            end = max(end, offsets.get(m, end) + _size_of(module, member_type, depth + 1))
        return end
    raise SpirvError(f"type {type_id} (opcode {op}) cannot be in a push constant block")


def _bindings_and_push_size(module: SpirvModule) -> tuple[list[Binding], int]:
    bindings: list[Binding] = []
    push_size = 0
    for var_id, ptr_type, storage in module.variables:
        pointer = module.types.get(ptr_type)
        if pointer is None or pointer[0] != OP_TYPE_POINTER or len(pointer[1]) < 2:
            raise SpirvError(f"variable {var_id} has no pointer type")
        pointee = pointer[1][1]
        if storage == SC_PUSH_CONSTANT:
            push_size = max(push_size, _size_of(module, pointee))
            continue
        var_deco = module.decorations.get(var_id, {})
        if DEC_BINDING not in var_deco:
            continue
        kind = _descriptor_type(storage, pointee, module.types, module.decorations)
        if kind is None:
            raise SpirvError(f"binding {var_deco[DEC_BINDING]} has an unsupported resource type")
        found = Binding(var_deco.get(DEC_DESCRIPTOR_SET, 0), var_deco[DEC_BINDING], kind)
        twin = next((b for b in bindings if (b.set, b.binding) == (found.set, found.binding)), None)
        if twin is None:
            bindings.append(found)
        elif twin != found:  # two views of one descriptor (vec4 and scalar) must agree on its type
            raise SpirvError(
                f"binding {found.set}.{found.binding} is both {twin.descriptor_type} and {kind}"
            )
    return bindings, push_size


def _local_size(
    module: SpirvModule,
) -> tuple[tuple[int, int, int], tuple[int, int, int] | None]:
    """(local size, the spec ids that set it or None): LocalSizeId operands, else the
    ``gl_WorkGroupSize`` composite's, else the fixed LocalSize mode."""
    local_size = module.local_size
    decorations = module.decorations
    local_size_ids: tuple[int, int, int] | None = None
    if module.local_size_id_operands is not None:
        ids = [decorations.get(c, {}).get(DEC_SPEC_ID) for c in module.local_size_id_operands]
        values = [module.constants.get(c, 1) for c in module.local_size_id_operands]
        local_size = (values[0], values[1], values[2])
        if all(x is not None for x in ids):
            local_size_ids = (ids[0], ids[1], ids[2])  # type: ignore[assignment]
    else:
        spec = module.spec_constant_values
        local_size_ids = _workgroup_size_spec_ids(module.words, decorations, spec)
        if local_size_ids is not None:
            local_size = _workgroup_size_defaults(module.words, decorations, spec)
    return local_size, local_size_ids


def _workgroup_composite(
    words: tuple[int, ...], decorations: dict[int, dict[int, int]]
) -> tuple[int, ...] | None:
    """The constituents of the ``gl_WorkGroupSize`` spec-constant composite, if any."""
    i, n = 5, len(words)
    while i < n:
        count, op = words[i] >> 16, words[i] & 0xFFFF
        if op == OP_SPEC_CONSTANT_COMPOSITE and count >= 6:
            result = words[i + 2]
            if decorations.get(result, {}).get(DEC_BUILTIN) == BUILTIN_WORKGROUP_SIZE:
                return words[i + 3 : i + 6]
        i += count
    return None


def _workgroup_size_spec_ids(
    words: tuple[int, ...], decorations: dict[int, dict[int, int]], spec: dict[int, int]
) -> tuple[int, int, int] | None:
    parts = _workgroup_composite(words, decorations)
    if parts is None:
        return None
    ids = [decorations.get(p, {}).get(DEC_SPEC_ID) for p in parts]
    if any(x is None for x in ids):
        return None
    return (ids[0], ids[1], ids[2])  # type: ignore[return-value]


def _workgroup_size_defaults(
    words: tuple[int, ...], decorations: dict[int, dict[int, int]], spec: dict[int, int]
) -> tuple[int, int, int]:
    parts = _workgroup_composite(words, decorations) or (0, 0, 0)
    values = [spec.get(p, 1) for p in parts]
    return (values[0], values[1], values[2])


def _descriptor_type(
    storage: int,
    pointee: int,
    types: dict[int, tuple[int, tuple[int, ...]]],
    decorations: dict[int, dict[int, int]],
) -> str | None:
    op, args = types.get(pointee, (0, ()))
    while op in (OP_TYPE_ARRAY, OP_TYPE_RUNTIME_ARRAY) and args:
        pointee = args[0]
        op, args = types.get(pointee, (0, ()))
    if storage == SC_STORAGE_BUFFER:
        return STORAGE_BUFFER
    if storage == SC_UNIFORM:
        deco = decorations.get(pointee, {})
        return STORAGE_BUFFER if DEC_BUFFER_BLOCK in deco else UNIFORM_BUFFER
    if storage == SC_UNIFORM_CONSTANT:
        if op == OP_TYPE_SAMPLED_IMAGE:
            return COMBINED_IMAGE_SAMPLER
        if op == OP_TYPE_IMAGE and len(args) >= 6:
            return STORAGE_IMAGE if args[5] == 2 else SAMPLED_IMAGE
    return None
