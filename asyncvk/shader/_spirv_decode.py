"""The decode pass of SPIR-V reflection: the instruction stream read once into tables.

Checks the framing (magic, word counts, operand counts, ids within the bound) and the function
structure (nesting, terminated blocks), and keeps the instructions reflection interprets:
types, constants, decorations, variables, entry points and execution modes. Any malformed input
raises SpirvError naming the word offset, never an IndexError.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from .._errors import SpirvError

SPIRV_MAGIC = 0x07230203

# opcodes
OP_NAME = 5
OP_ENTRY_POINT = 15
OP_EXECUTION_MODE = 16
OP_TYPE_BOOL = 20
OP_TYPE_INT = 21
OP_TYPE_FLOAT = 22
OP_TYPE_VECTOR = 23
OP_TYPE_MATRIX = 24
OP_TYPE_IMAGE = 25
OP_TYPE_SAMPLED_IMAGE = 27
OP_TYPE_ARRAY = 28
OP_TYPE_RUNTIME_ARRAY = 29
OP_TYPE_STRUCT = 30
OP_TYPE_POINTER = 32
OP_CONSTANT = 43
OP_SPEC_CONSTANT_TRUE = 48
OP_SPEC_CONSTANT_FALSE = 49
OP_SPEC_CONSTANT = 50
OP_VARIABLE = 59
OP_DECORATE = 71
OP_MEMBER_DECORATE = 72
OP_FUNCTION = 54
OP_FUNCTION_END = 56
OP_LABEL = 248
OP_EXECUTION_MODE_ID = 331
# block terminators: Branch, BranchConditional, Switch, Kill, Return, ReturnValue, Unreachable,
# TerminateInvocation, IgnoreIntersectionKHR, TerminateRayKHR, EmitMeshTasksEXT
TERMINATORS = frozenset((249, 250, 251, 252, 253, 254, 255, 4416, 4448, 4449, 5294))

# decorations
DEC_SPEC_ID = 1
DEC_BLOCK = 2
DEC_BUFFER_BLOCK = 3
DEC_ARRAY_STRIDE = 6
DEC_BINDING = 33
DEC_DESCRIPTOR_SET = 34
DEC_OFFSET = 35

# storage classes
SC_UNIFORM_CONSTANT = 0
SC_UNIFORM = 2
SC_PUSH_CONSTANT = 9
SC_STORAGE_BUFFER = 12

MODE_LOCAL_SIZE = 17
MODE_LOCAL_SIZE_ID = 38
OP_SPEC_CONSTANT_COMPOSITE = 51
DEC_BUILTIN = 11
BUILTIN_WORKGROUP_SIZE = 25


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
        OP_TYPE_BOOL,
        OP_TYPE_INT,
        OP_TYPE_FLOAT,
        OP_TYPE_VECTOR,
        OP_TYPE_MATRIX,
        OP_TYPE_IMAGE,
        OP_TYPE_SAMPLED_IMAGE,
        OP_TYPE_ARRAY,
        OP_TYPE_RUNTIME_ARRAY,
        OP_TYPE_STRUCT,
        OP_TYPE_POINTER,
    )
)


@dataclass
class SpirvModule:
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
            if op == OP_LABEL:
                if self.in_block:
                    raise SpirvError("a block starts before the previous one was terminated", i)
                self.in_block = True
            elif op in TERMINATORS:
                self.in_block = False
            elif op == OP_FUNCTION_END:
                if self.in_block:
                    raise SpirvError(f"function {function} ends inside an unterminated block", i)
                self.function = None
            elif op == OP_FUNCTION:
                raise SpirvError(f"function starts inside function {function}", i)
        elif op == OP_FUNCTION:
            _type, self.function, *_ = self.reader.operands(i, argc, 4, op)
            self.functions.add(self.function)
            self.function_at = i
        elif op == OP_FUNCTION_END:
            raise SpirvError("OpFunctionEnd outside a function", i)

    def finish(self, entry_points: list[tuple[int, int, str]]) -> None:
        if self.function is not None:
            raise SpirvError(
                f"the module ends inside function {self.function} (truncated?)", self.function_at
            )
        for _model, target, name in entry_points:
            if target not in self.functions:
                raise SpirvError(f"entry point {name!r} names id {target}, which is no function")


def decode_spirv(spirv: bytes) -> SpirvModule:
    """Decode SPIR-V bytes into the tables reflection interprets."""
    return _decode(_words(spirv))


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


def _decode(words: tuple[int, ...]) -> SpirvModule:
    """Read the instruction stream once, checking its framing and function structure."""
    n = len(words)
    reader = _Reader(words)
    module = SpirvModule(words)
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


def _record(module: SpirvModule, reader: _Reader, op: int, i: int, count: int) -> None:
    """Keep what instruction ``op`` at word ``i`` tells reflection."""
    argc = count - 1
    if op in (OP_DECORATE, OP_MEMBER_DECORATE):
        _record_decoration(module, reader, op, i, argc)
    elif op in _TYPE_OPS:
        result, *rest = reader.operands(i, argc, 1, op)
        bound = module.words[3]
        if result >= bound:
            raise SpirvError(f"id {result} is outside the bound {bound}", i)
        module.types[result] = (op, tuple(rest))
    elif op in (OP_CONSTANT, OP_SPEC_CONSTANT):
        _type, result, *rest = reader.operands(i, argc, 3, op)
        value = rest[0]
        (module.constants if op == OP_CONSTANT else module.spec_constant_values)[result] = value
        if op == OP_SPEC_CONSTANT:
            module.constants[result] = value
    elif op in (OP_SPEC_CONSTANT_TRUE, OP_SPEC_CONSTANT_FALSE):
        reader.operands(i, argc, 2, op)
    elif op == OP_VARIABLE:
        type_id, result, storage, *_ = reader.operands(i, argc, 3, op)
        module.variables.append((result, type_id, storage))
    else:
        _record_mode_or_name(module, reader, op, i, count)


def _record_decoration(module: SpirvModule, reader: _Reader, op: int, i: int, argc: int) -> None:
    if op == OP_DECORATE:
        target, deco, *rest = reader.operands(i, argc, 2, op)
        module.decorations.setdefault(target, {})[deco] = rest[0] if rest else 1
        if deco == DEC_SPEC_ID:
            if not rest:
                raise SpirvError("SpecId decoration without an id", i)
            module.spec_ids.append(rest[0])
    else:
        target, member, deco, *rest = reader.operands(i, argc, 3, op)
        if deco == DEC_OFFSET and rest:
            module.member_offsets.setdefault(target, {})[member] = rest[0]


def _record_mode_or_name(module: SpirvModule, reader: _Reader, op: int, i: int, count: int) -> None:
    """Entry points, execution modes and debug names; other opcodes are skipped."""
    argc, words = count - 1, module.words
    if op == OP_ENTRY_POINT:
        model, target, *_ = reader.operands(i, argc, 3, op)
        module.entry_points.append((model, target, _string(words[i + 3 : i + count], i)))
    elif op == OP_EXECUTION_MODE:
        _entry, mode, *rest = reader.operands(i, argc, 2, op)
        if mode == MODE_LOCAL_SIZE:
            if len(rest) < 3:
                raise SpirvError("LocalSize needs three operands", i)
            module.local_size = (rest[0], rest[1], rest[2])
    elif op == OP_EXECUTION_MODE_ID:
        _entry, mode, *rest = reader.operands(i, argc, 2, op)
        if mode == MODE_LOCAL_SIZE_ID:
            if len(rest) < 3:
                raise SpirvError("LocalSizeId needs three operands", i)
            module.local_size_id_operands = (rest[0], rest[1], rest[2])
    elif op == OP_NAME:
        reader.operands(i, argc, 1, op)
        _string(words[i + 2 : i + count], i)
