"""The interface a shader's GLSL declares, and the check of a SPIR-V body against it: never a
false alarm on a builtin shader, and a clear reason for a body of another shader. No GPU."""

from __future__ import annotations

import functools

import pytest

from asyncvk.shader import ShaderOptions, builtin_shaders, compile_glsl, reflect_spirv
from asyncvk.shader._interface import declared_interface, interface_mismatch
from asyncvk.shader._options import option_prelude, splice_prelude
from asyncvk.shader._reflect import Binding

REGISTRY = builtin_shaders()
SHADERS = sorted(
    [*REGISTRY.names(), *(v for n in REGISTRY.names() if (v := REGISTRY.shape_variant(n)))]
)
OPTIONS = {
    "fp32": ShaderOptions(),
    "fp16_storage": ShaderOptions(use_fp16_storage=True),
    "fp16_arithmetic": ShaderOptions(use_fp16_storage=True, use_fp16_arithmetic=True),
}


@functools.cache
def _compile(shader: str, options: ShaderOptions = OPTIONS["fp32"]) -> bytes:
    text = splice_prelude(REGISTRY.get(shader).source, option_prelude(options))
    return compile_glsl(text, f"{shader}.comp")


def _check(body: bytes, shader: str) -> str | None:
    return interface_mismatch(reflect_spirv(body), declared_interface(REGISTRY.get(shader).source))


@pytest.mark.parametrize("options", OPTIONS.values(), ids=OPTIONS.keys())
def test_every_builtin_shader_passes_against_its_own_source(options: ShaderOptions) -> None:
    """A false alarm would recompile that shader on every warm start: none may exist."""
    alarms = {s: problem for s in SHADERS if (problem := _check(_compile(s, options), s))}
    assert alarms == {}


@pytest.mark.parametrize(
    ("victim", "donor", "reason"),
    [
        ("convolution", "pooling", "descriptor bindings [0.0 storage_buffer, 0.1 storage_buffer]"),
        ("softmax", "scale_add", "a 8-byte push-constant block; the source declares 12"),
        ("convolution_tiled", "convolutiondepthwise", "specialization ids [12]"),
        ("deconvolution_tiled", "convolution_tiled", "specialization ids [2, 3, 6, 11, 13]"),
        ("softmax", "softmax@shapes", "a 0-byte push-constant block"),
    ],
)
def test_a_body_of_another_builtin_shader_is_named(victim: str, donor: str, reason: str) -> None:
    problem = _check(_compile(donor), victim)
    assert problem is not None and reason in problem, problem


def test_most_pairs_of_builtin_shaders_differ_in_their_interface() -> None:
    """What is left are shaders with identical interfaces (the docs say so): the key-bound
    entry hash, not this check, keeps their bodies apart."""
    bodies = {s: _compile(s) for s in SHADERS}
    same = [(a, b) for a in SHADERS for b in SHADERS if a != b and _check(bodies[b], a) is None]
    assert len(same) < len(SHADERS) ** 2 // 20, same
    assert ("convolutiondepthwise", "deconvolution") in same


SOURCE = """#version 450
// layout(binding = 7) buffer Commented { float x[]; };
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;
layout(constant_id = 0) const float alpha = 1.0; layout(constant_id = 7) const bool f = false;
layout(binding = 0) readonly buffer A { float a[]; };
layout(set = 0, binding = 2) writeonly buffer C { vec4 c[]; };
layout(binding = 1) uniform U { float u; };
layout(push_constant) uniform P { int w, h; float s; ivec4 v; int col[3]; } p;
void main() { c[0] = vec4(a[0] * alpha + p.s + float(p.w + p.h + p.v.x + p.col[2]) + u); }
"""


def test_declarations_are_read_off_the_source() -> None:
    declared = declared_interface(SOURCE)
    assert declared.bindings == (
        Binding(0, 0, "storage_buffer"),
        Binding(0, 1, "uniform_buffer"),
        Binding(0, 2, "storage_buffer"),
    )
    assert declared.push_constant_size == 44  # ivec4 at 16, then int[3] at 32
    assert declared.specialization_ids == {0, 7, 233, 234, 235}
    assert declared.local_size_ids == (233, 234, 235) and declared.local_size is None
    info = reflect_spirv(compile_glsl(SOURCE))
    assert info.push_constant_size == 44
    assert interface_mismatch(info, declared) is None  # the unused constant 7 may be dropped


def test_a_fixed_local_size_is_checked() -> None:
    fixed = "#version 450\nlayout(local_size_x = 16, local_size_y = 4) in;\nvoid main() {}\n"
    declared = declared_interface(fixed)
    assert declared.local_size == (16, 4, 1) and declared.local_size_ids is None
    assert interface_mismatch(reflect_spirv(compile_glsl(fixed)), declared) is None
    other = fixed.replace("local_size_y = 4", "local_size_y = 8")
    problem = interface_mismatch(reflect_spirv(compile_glsl(other)), declared)
    assert problem == "local size (16, 8, 1); the source fixes it to (16, 4, 1)"
    problem = interface_mismatch(reflect_spirv(compile_glsl(SOURCE)), declared)
    assert problem is not None and "descriptor bindings" in problem


def test_what_the_source_cannot_tell_is_not_checked() -> None:
    """A macro as a value, a struct in the push block: not guessed, so never a false alarm."""
    text = """#version 450
#define B 3
#define N 64
layout(local_size_x = N) in;
layout(constant_id = B) const int k = 1;
layout(binding = B) buffer A { float a[]; };
struct S { int x; };
layout(push_constant) uniform P { S s; } p;
void main() { a[0] = float(k + p.s.x); }
"""
    declared = declared_interface(text)
    assert declared.bindings is None and declared.push_constant_size is None
    assert declared.specialization_ids is None and declared.local_size is None
    assert interface_mismatch(reflect_spirv(compile_glsl(text)), declared) is None
