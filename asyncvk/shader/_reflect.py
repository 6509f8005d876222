"""SPIR-V reflection without external tools: what a pipeline layout needs from a shader.

Reads the instruction stream once and resolves the entry points, descriptor bindings, the
push-constant block size, specialization constant ids and the declared local size. Any malformed
input raises SpirvError naming the word offset, never an IndexError; so does a module whose
functions are cut short (a truncated body), which some drivers crash on instead of refusing.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from .._errors import SpirvError

SPIRV_MAGIC = 0x07230203

# opcodes
_OP_NAME = 5
_OP_ENTRY_POINT = 15
_OP_EXECUTION_MODE = 16
_OP_TYPE_BOOL = 20
_OP_TYPE_INT = 21
_OP_TYPE_FLOAT = 22
_OP_TYPE_VECTOR = 23
_OP_TYPE_MATRIX = 24
_OP_TYPE_IMAGE = 25
_OP_TYPE_SAMPLED_IMAGE = 27
_OP_TYPE_ARRAY = 28
_OP_TYPE_RUNTIME_ARRAY = 29
_OP_TYPE_STRUCT = 30
_OP_TYPE_POINTER = 32
_OP_CONSTANT = 43
_OP_SPEC_CONSTANT_TRUE = 48
_OP_SPEC_CONSTANT_FALSE = 49
_OP_SPEC_CONSTANT = 50
_OP_VARIABLE = 59
_OP_DECORATE = 71
_OP_MEMBER_DECORATE = 72
_OP_FUNCTION = 54
_OP_FUNCTION_END = 56
_OP_LABEL = 248
_OP_EXECUTION_MODE_ID = 331
# block terminators: Branch, BranchConditional, Switch, Kill, Return, ReturnValue, Unreachable,
# TerminateInvocation, IgnoreIntersectionKHR, TerminateRayKHR, EmitMeshTasksEXT
_TERMINATORS = frozenset((249, 250, 251, 252, 253, 254, 255, 4416, 4448, 4449, 5294))

#: Execution model of compute shaders (``OpEntryPoint GLCompute``).
GL_COMPUTE = 5

# decorations
_DEC_SPEC_ID = 1
_DEC_BLOCK = 2
_DEC_BUFFER_BLOCK = 3
_DEC_ARRAY_STRIDE = 6
_DEC_BINDING = 33
_DEC_DESCRIPTOR_SET = 34
_DEC_OFFSET = 35

# storage classes
_SC_UNIFORM_CONSTANT = 0
_SC_UNIFORM = 2
_SC_PUSH_CONSTANT = 9
_SC_STORAGE_BUFFER = 12

_MODE_LOCAL_SIZE = 17
_MODE_LOCAL_SIZE_ID = 38

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


class _Reader:
    def __init__(self, words: tuple[int, ...]) -> None:
        self.words = words

    def operands(self, start: int, count: int, need: int, op: int) -> tuple[int, ...]:
        if count < need:
            raise SpirvError(f"opcode {op} has {count} operand words, needs {need}", start)
        return self.words[start + 1 : start + 1 + count]


def _string(words: tuple[int, ...], offset: int) -> str:
    raw = b"".join(struct.pack("<I", w) for w in words)
    end = raw.find(b"\0")
    if end < 0:
        raise SpirvError("unterminated string literal", offset)
    return raw[:end].decode("utf-8", "replace")


_TYPE_OPS = frozenset(
    (
        _OP_TYPE_BOOL,
        _OP_TYPE_INT,
        _OP_TYPE_FLOAT,
        _OP_TYPE_VECTOR,
        _OP_TYPE_MATRIX,
        _OP_TYPE_IMAGE,
        _OP_TYPE_SAMPLED_IMAGE,
        _OP_TYPE_ARRAY,
        _OP_TYPE_RUNTIME_ARRAY,
        _OP_TYPE_STRUCT,
        _OP_TYPE_POINTER,
    )
)


@dataclass
class _Module:
    """The instructions reflection needs, decoded into tables (the decode pass's result)."""

    words: tuple[int, ...]
    decorations: dict[int, dict[int, int]] = field(default_factory=dict)
    member_offsets: dict[int, dict[int, int]] = field(default_factory=dict)
    types: dict[int, tuple[int, tuple[int, ...]]] = field(default_factory=dict)
    constants: dict[int, int] = field(default_factory=dict)
    #: (id, pointer type id, storage class)
    variables: list[tuple[int, int, int]] = field(default_factory=list)
    spec_ids: list[int] = field(default_factory=list)
    spec_constant_values: dict[int, int] = field(default_factory=dict)
    local_size: tuple[int, int, int] = (1, 1, 1)
    local_size_id_operands: tuple[int, int, int] | None = None
    #: (model, function id, name)
    entry_points: list[tuple[int, int, str]] = field(default_factory=list)


class _FunctionStructure:
    """Checks that functions nest properly and every block is terminated, instruction by
    instruction: a truncated body crashes some drivers instead of being refused."""

    def __init__(self, reader: _Reader) -> None:
        self.reader = reader
        self.functions: set[int] = set()
        self.function: int | None = None  # the function being read, with where it started
        self.function_at = 0
        self.in_block = False

    def step(self, op: int, i: int, argc: int) -> None:
        function = self.function
        if function is not None:
            if op == _OP_LABEL:
                if self.in_block:
                    raise SpirvError("a block starts before the previous one was terminated", i)
                self.in_block = True
            elif op in _TERMINATORS:
                self.in_block = False
            elif op == _OP_FUNCTION_END:
                if self.in_block:
                    raise SpirvError(f"function {function} ends inside an unterminated block", i)
                self.function = None
            elif op == _OP_FUNCTION:
                raise SpirvError(f"function starts inside function {function}", i)
        elif op == _OP_FUNCTION:
            _type, self.function, *_ = self.reader.operands(i, argc, 4, op)
            self.functions.add(self.function)
            self.function_at = i
        elif op == _OP_FUNCTION_END:
            raise SpirvError("OpFunctionEnd outside a function", i)

    def finish(self, entry_points: list[tuple[int, int, str]]) -> None:
        if self.function is not None:
            raise SpirvError(
                f"the module ends inside function {self.function} (truncated?)", self.function_at
            )
        for _model, target, name in entry_points:
            if target not in self.functions:
                raise SpirvError(f"entry point {name!r} names id {target}, which is no function")


def reflect_spirv(spirv: bytes) -> ShaderInfo:
    """Parse SPIR-V bytes into a ShaderInfo."""
    module = _decode(_words(spirv))
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


# -- decode pass -------------------------------------------------------------------------------


def _words(spirv: bytes) -> tuple[int, ...]:
    """The module as little-endian words, its size and magic checked."""
    if len(spirv) % 4:
        raise SpirvError(f"size {len(spirv)} is not a multiple of 4 bytes")
    n = len(spirv) // 4
    if n < 5:
        raise SpirvError(f"only {n} words; the header alone is 5")
    words = struct.unpack(f"<{n}I", spirv)
    if words[0] != SPIRV_MAGIC:
        raise SpirvError(f"bad magic 0x{words[0]:08x} (expected 0x{SPIRV_MAGIC:08x})", 0)
    return words


def _decode(words: tuple[int, ...]) -> _Module:
    """Read the instruction stream once, checking its framing and function structure."""
    n = len(words)
    reader = _Reader(words)
    module = _Module(words)
    structure = _FunctionStructure(reader)
    i = 5
    while i < n:
        word = words[i]
        count, op = word >> 16, word & 0xFFFF
        if count == 0:
            raise SpirvError("instruction with word count 0", i)
        if i + count > n:
            raise SpirvError(f"opcode {op} runs past the end ({count} words)", i)
        structure.step(op, i, count - 1)
        _record(module, reader, op, i, count)
        i += count
    structure.finish(module.entry_points)
    return module


def _record(module: _Module, reader: _Reader, op: int, i: int, count: int) -> None:
    """Keep what instruction ``op`` at word ``i`` tells reflection."""
    argc = count - 1
    if op in (_OP_DECORATE, _OP_MEMBER_DECORATE):
        _record_decoration(module, reader, op, i, argc)
    elif op in _TYPE_OPS:
        result, *rest = reader.operands(i, argc, 1, op)
        bound = module.words[3]
        if result >= bound:
            raise SpirvError(f"id {result} is outside the bound {bound}", i)
        module.types[result] = (op, tuple(rest))
    elif op in (_OP_CONSTANT, _OP_SPEC_CONSTANT):
        _type, result, *rest = reader.operands(i, argc, 3, op)
        value = rest[0]
        (module.constants if op == _OP_CONSTANT else module.spec_constant_values)[result] = value
        if op == _OP_SPEC_CONSTANT:
            module.constants[result] = value
    elif op in (_OP_SPEC_CONSTANT_TRUE, _OP_SPEC_CONSTANT_FALSE):
        reader.operands(i, argc, 2, op)
    elif op == _OP_VARIABLE:
        type_id, result, storage, *_ = reader.operands(i, argc, 3, op)
        module.variables.append((result, type_id, storage))
    else:
        _record_mode_or_name(module, reader, op, i, count)


def _record_decoration(module: _Module, reader: _Reader, op: int, i: int, argc: int) -> None:
    if op == _OP_DECORATE:
        target, deco, *rest = reader.operands(i, argc, 2, op)
        module.decorations.setdefault(target, {})[deco] = rest[0] if rest else 1
        if deco == _DEC_SPEC_ID:
            if not rest:
                raise SpirvError("SpecId decoration without an id", i)
            module.spec_ids.append(rest[0])
    else:
        target, member, deco, *rest = reader.operands(i, argc, 3, op)
        if deco == _DEC_OFFSET and rest:
            module.member_offsets.setdefault(target, {})[member] = rest[0]


def _record_mode_or_name(module: _Module, reader: _Reader, op: int, i: int, count: int) -> None:
    """Entry points, execution modes and debug names; other opcodes are skipped."""
    argc, words = count - 1, module.words
    if op == _OP_ENTRY_POINT:
        model, target, *_ = reader.operands(i, argc, 3, op)
        module.entry_points.append((model, target, _string(words[i + 3 : i + count], i)))
    elif op == _OP_EXECUTION_MODE:
        _entry, mode, *rest = reader.operands(i, argc, 2, op)
        if mode == _MODE_LOCAL_SIZE:
            if len(rest) < 3:
                raise SpirvError("LocalSize needs three operands", i)
            module.local_size = (rest[0], rest[1], rest[2])
    elif op == _OP_EXECUTION_MODE_ID:
        _entry, mode, *rest = reader.operands(i, argc, 2, op)
        if mode == _MODE_LOCAL_SIZE_ID:
            if len(rest) < 3:
                raise SpirvError("LocalSizeId needs three operands", i)
            module.local_size_id_operands = (rest[0], rest[1], rest[2])
    elif op == _OP_NAME:
        reader.operands(i, argc, 1, op)
        _string(words[i + 2 : i + count], i)


# -- interpretation pass -----------------------------------------------------------------------


def _size_of(module: _Module, type_id: int, depth: int = 0) -> int:
    """Bytes a push-constant member of ``type_id`` spans (explicit offsets and strides win)."""
    if depth > 32 or type_id not in module.types:
        raise SpirvError(f"push constant member type {type_id} cannot be sized")
    op, args = module.types[type_id]
    if op in (_OP_TYPE_INT, _OP_TYPE_FLOAT):
        return args[0] // 8
    if op == _OP_TYPE_BOOL:
        return 4
    if op in (_OP_TYPE_VECTOR, _OP_TYPE_MATRIX):
        return _size_of(module, args[0], depth + 1) * args[1]
    if op == _OP_TYPE_ARRAY:
        stride = module.decorations.get(type_id, {}).get(_DEC_ARRAY_STRIDE)
        length = module.constants.get(args[1])
        if length is None:
            raise SpirvError(f"array length id {args[1]} is not a constant")
        return (stride or _size_of(module, args[0], depth + 1)) * length
    if op == _OP_TYPE_STRUCT:
        offsets = module.member_offsets.get(type_id, {})
        end = 0
        for m, member_type in enumerate(args):
            end = max(end, offsets.get(m, end) + _size_of(module, member_type, depth + 1))
        return end
    raise SpirvError(f"type {type_id} (opcode {op}) cannot be in a push constant block")


def _bindings_and_push_size(module: _Module) -> tuple[list[Binding], int]:
    bindings: list[Binding] = []
    push_size = 0
    for var_id, ptr_type, storage in module.variables:
        pointer = module.types.get(ptr_type)
        if pointer is None or pointer[0] != _OP_TYPE_POINTER or len(pointer[1]) < 2:
            raise SpirvError(f"variable {var_id} has no pointer type")
        pointee = pointer[1][1]
        if storage == _SC_PUSH_CONSTANT:
            push_size = max(push_size, _size_of(module, pointee))
            continue
        var_deco = module.decorations.get(var_id, {})
        if _DEC_BINDING not in var_deco:
            continue
        kind = _descriptor_type(storage, pointee, module.types, module.decorations)
        if kind is None:
            raise SpirvError(f"binding {var_deco[_DEC_BINDING]} has an unsupported resource type")
        binding = var_deco[_DEC_BINDING]
        bindings.append(Binding(var_deco.get(_DEC_DESCRIPTOR_SET, 0), binding, kind))
    return bindings, push_size


def _local_size(
    module: _Module,
) -> tuple[tuple[int, int, int], tuple[int, int, int] | None]:
    """(local size, the spec ids that set it or None): LocalSizeId operands, else the
    ``gl_WorkGroupSize`` composite's, else the fixed LocalSize mode."""
    local_size = module.local_size
    decorations = module.decorations
    local_size_ids: tuple[int, int, int] | None = None
    if module.local_size_id_operands is not None:
        ids = [decorations.get(c, {}).get(_DEC_SPEC_ID) for c in module.local_size_id_operands]
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


_OP_SPEC_CONSTANT_COMPOSITE = 51
_DEC_BUILTIN = 11
_BUILTIN_WORKGROUP_SIZE = 25


def _workgroup_composite(
    words: tuple[int, ...], decorations: dict[int, dict[int, int]]
) -> tuple[int, ...] | None:
    """The constituents of the ``gl_WorkGroupSize`` spec-constant composite, if any."""
    i, n = 5, len(words)
    while i < n:
        count, op = words[i] >> 16, words[i] & 0xFFFF
        if op == _OP_SPEC_CONSTANT_COMPOSITE and count >= 6:
            result = words[i + 2]
            if decorations.get(result, {}).get(_DEC_BUILTIN) == _BUILTIN_WORKGROUP_SIZE:
                return words[i + 3 : i + 6]
        i += count
    return None


def _workgroup_size_spec_ids(
    words: tuple[int, ...], decorations: dict[int, dict[int, int]], spec: dict[int, int]
) -> tuple[int, int, int] | None:
    parts = _workgroup_composite(words, decorations)
    if parts is None:
        return None
    ids = [decorations.get(p, {}).get(_DEC_SPEC_ID) for p in parts]
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
    while op in (_OP_TYPE_ARRAY, _OP_TYPE_RUNTIME_ARRAY) and args:
        pointee = args[0]
        op, args = types.get(pointee, (0, ()))
    if storage == _SC_STORAGE_BUFFER:
        return STORAGE_BUFFER
    if storage == _SC_UNIFORM:
        deco = decorations.get(pointee, {})
        return STORAGE_BUFFER if _DEC_BUFFER_BLOCK in deco else UNIFORM_BUFFER
    if storage == _SC_UNIFORM_CONSTANT:
        if op == _OP_TYPE_SAMPLED_IMAGE:
            return COMBINED_IMAGE_SAMPLER
        if op == _OP_TYPE_IMAGE and len(args) >= 6:
            return STORAGE_IMAGE if args[5] == 2 else SAMPLED_IMAGE
    return None
