from __future__ import annotations

import random
import struct

import pytest

from asyncvk import SpirvError
from asyncvk.shader import compile_glsl, reflect_spirv
from asyncvk.shader._reflect import GL_COMPUTE, EntryPoint

SOURCE = """#version 450
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;
layout(constant_id = 0) const float alpha = 1.0;
layout(constant_id = 1) const int n = 0;
layout(constant_id = 7) const bool flag = false;
layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 2) writeonly buffer C { vec4 c[]; };
layout(binding = 1) uniform U { float u; };
layout(push_constant) uniform P { int w; int h; float s; ivec4 v; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (flag) c[i] = vec4(a[i] * alpha + p.s + float(n + p.v.x) + u);
}
"""

FIXED = """#version 450
layout(local_size_x = 16, local_size_y = 4, local_size_z = 2) in;
layout(binding = 0) buffer A { float a[]; };
void main() { a[gl_LocalInvocationIndex] = 1.0; }
"""


def test_reflection_matches_declarations() -> None:
    info = reflect_spirv(compile_glsl(SOURCE))
    kinds = {b.binding: b.descriptor_type for b in info.bindings}
    assert kinds == {0: "storage_buffer", 1: "uniform_buffer", 2: "storage_buffer"}
    assert info.push_constant_size == 32  # ivec4 aligned at 16
    assert info.specialization_ids == (0, 1, 7, 233, 234, 235)
    assert info.user_specialization_ids == (0, 1, 7)
    assert info.local_size_ids == (233, 234, 235)


ALIASED = """#version 450
layout(local_size_x = 8) in;
layout(binding = 0) readonly buffer A { float a[]; };
layout(binding = 0) readonly buffer A4 { vec4 a4[]; };
layout(binding = 1) writeonly buffer O { float o[]; };
void main() { uint i = gl_GlobalInvocationID.x; o[i] = a[i] + a4[i].y; }
"""


def test_two_views_of_one_buffer_are_one_binding() -> None:
    """gemm_tiled.comp reads its operands as floats and as vec4: one descriptor each."""
    from asyncvk.shader._interface import declared_interface

    info = reflect_spirv(compile_glsl(ALIASED))
    assert [(b.binding, b.descriptor_type) for b in info.bindings] == [
        (0, "storage_buffer"),
        (1, "storage_buffer"),
    ]
    declared = declared_interface(ALIASED)
    assert declared.bindings == info.bindings and declared.read_only_bindings == {0}
    # views that disagree on the descriptor's type are no binding Vulkan can make
    clash = ALIASED.replace("readonly buffer A4 { vec4 a4[]; }", "uniform A4 { vec4 a4[4]; }")
    with pytest.raises(SpirvError, match=r"binding 0\.0 is both"):
        reflect_spirv(compile_glsl(clash))


def test_fixed_local_size() -> None:
    info = reflect_spirv(compile_glsl(FIXED))
    assert info.local_size == (16, 4, 2)
    assert info.local_size_ids is None
    assert info.push_constant_size == 0


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"", "header"),
        (b"\x03\x02\x23\x07" * 2, "header"),
        (b"abc", "multiple of 4"),
        (struct.pack("<5I", 0xDEADBEEF, 0x10000, 0, 10, 0), "bad magic"),
        (struct.pack("<6I", 0x07230203, 0x10000, 0, 10, 0, 0), "word count 0"),
        (struct.pack("<6I", 0x07230203, 0x10000, 0, 10, 0, (9 << 16) | 71), "past the end"),
    ],
)
def test_malformed_spirv_is_a_clear_error(data: bytes, needle: str) -> None:
    with pytest.raises(SpirvError, match=needle):
        reflect_spirv(data)


def test_random_corruption_only_ever_raises_spirv_error() -> None:
    good = bytearray(compile_glsl(SOURCE))
    rng = random.Random(7767517)
    for _ in range(400):
        data = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        cut = rng.choice([len(data), rng.randrange(len(data)) & ~3])
        try:
            reflect_spirv(bytes(data[:cut]))
        except SpirvError:
            pass


# -- entry points and cut-short modules (some drivers crash on these instead of refusing) ----

_OP_ENTRY_POINT, _OP_FUNCTION_END, _OP_LABEL, _OP_RETURN = 15, 56, 248, 253


def _instructions(words: list[int]) -> list[tuple[int, int]]:
    """(offset, opcode) of every instruction after the header."""
    out, i = [], 5
    while i < len(words):
        out.append((i, words[i] & 0xFFFF))
        i += words[i] >> 16
    return out


def _words(spirv: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(spirv) // 4}I", spirv))


def _pack(words: list[int]) -> bytes:
    return struct.pack(f"<{len(words)}I", *words)


def test_the_entry_point_is_reflected() -> None:
    info = reflect_spirv(compile_glsl(FIXED))
    assert info.entry_points == (EntryPoint(GL_COMPUTE, "main"),)


def test_a_module_cut_at_an_instruction_boundary_is_an_error() -> None:
    words = _words(compile_glsl(SOURCE))
    # every cut from the function's first block on leaves the function open
    offset = next(i for i, op in _instructions(words) if op == _OP_LABEL)
    for cut in [offset, offset + 2, len(words) - 1]:
        with pytest.raises(SpirvError, match="ends inside function"):
            reflect_spirv(_pack(words[:cut]))


def test_a_block_without_a_terminator_is_an_error() -> None:
    words = _words(compile_glsl(FIXED))
    ret = max(i for i, op in _instructions(words) if op == _OP_RETURN)
    words[ret] = (1 << 16) | 0  # OpNop instead of the last OpReturn
    with pytest.raises(SpirvError, match="unterminated block"):
        reflect_spirv(_pack(words))


def test_an_entry_point_that_names_no_function_is_an_error() -> None:
    words = _words(compile_glsl(FIXED))
    entry = next(i for i, op in _instructions(words) if op == _OP_ENTRY_POINT)
    assert words[entry + 2] != words[3] - 1
    words[entry + 2] = words[3] - 1  # the highest id: not the function's
    with pytest.raises(SpirvError, match="which is no function"):
        reflect_spirv(_pack(words))
