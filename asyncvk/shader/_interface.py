"""The interface a builtin shader's GLSL declares, and the check of a SPIR-V body against it.

SPIR-V read from a cache file is the output of a compile that ran in another process. Before it
is used, its reflection (which has to happen anyway, for the pipeline layout) is compared with
what the shader's own source declares: one GLCompute ``main``, the same descriptor bindings
(set, binding, type), the same push-constant block size, no specialization id the source does
not declare, and the same local size ids or fixed local size. A body of another shader, or one
cut short, is then a miss instead of a wrong pipeline or a failed run.

The declarations are read off the source text with a few regular expressions, once per source:
compiling it would cost the GLSL compile the cache is there to avoid. What they cannot tell is
left unchecked (``None``), never guessed. The optimizer drops specialization constants a shader
never reads, so the declared ids are an upper bound; bindings and the push block are exact,
because dispatches already require all of them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from ._reflect import (
    COMBINED_IMAGE_SAMPLER,
    GL_COMPUTE,
    SAMPLED_IMAGE,
    STORAGE_BUFFER,
    STORAGE_IMAGE,
    UNIFORM_BUFFER,
    Binding,
    EntryPoint,
    ShaderInfo,
)

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_LAYOUT = re.compile(r"\blayout\s*\(([^)]*)\)\s*([^;{]*)([;{])")
_MEMBER = re.compile(r"(\w+)\s+(\w+)")
_MEMBER_NAME = re.compile(r"\s*(\w+)\s*(?:\[\s*(\d+)\s*\])?\s*")
#: (size, std430 alignment) of the push-constant member types the check can size.
_PUSH_TYPES = {
    **{t: (4, 4) for t in ("int", "uint", "float", "bool")},
    **{f"{p}vec{n}": (4 * n, 8 if n == 2 else 16) for p in ("", "i", "u", "b") for n in (2, 3, 4)},
}
_AXES = ("x", "y", "z")
EXPECTED_ENTRY_POINTS = (EntryPoint(GL_COMPUTE, "main"),)


@dataclass(frozen=True)
class DeclaredInterface:
    """What a GLSL compute shader declares; a None field could not be read off the text."""

    bindings: tuple[Binding, ...] | None
    push_constant_size: int | None
    specialization_ids: frozenset[int] | None
    #: Spec ids of the local size when all three are given by ``local_size_*_id``.
    local_size_ids: tuple[int, int, int] | None
    #: The local size when all three are fixed numbers (1 where not written).
    local_size: tuple[int, int, int] | None
    #: Set 0's storage-buffer bindings declared ``readonly``: a dispatch never writes them, so
    #: a recorder needs no barrier between two dispatches that only read one buffer.
    read_only_bindings: frozenset[int] = frozenset()


#: A qualifier value that is not a plain number (a macro, an expression): the source cannot tell.
_UNREADABLE = -1


def _qualifiers(text: str) -> dict[str, int | None]:
    """``binding = 0, set = 1, std430`` -> {"binding": 0, "set": 1, "std430": None}."""
    out: dict[str, int | None] = {}
    for part in text.split(","):
        name, _, value = part.partition("=")
        name, value = name.strip(), value.strip()
        try:
            out[name] = int(value, 0) if value else None
        except ValueError:
            out[name] = _UNREADABLE
    return out


def _with_id(ids: set[int] | None, value: int | None) -> set[int] | None:
    """``ids`` plus a specialization id; None (not checked) once one cannot be read."""
    if ids is None or value is None or value < 0:
        return None
    return ids | {value}


def _descriptor_type(head: str, terminator: str) -> str | None:
    """The reflection's name for a ``layout(binding = n) <head>`` declaration's type."""
    words = head.split()
    if "buffer" in words:
        return STORAGE_BUFFER
    if "uniform" not in words:
        return None
    if terminator == "{":
        return UNIFORM_BUFFER
    kind = words[-2] if len(words) >= 2 else ""
    base = kind.lstrip("iu")
    if base.startswith("image"):
        return STORAGE_IMAGE
    if base.startswith("sampler") and not base.startswith("samplerBuffer"):
        return COMBINED_IMAGE_SAMPLER
    if base.startswith("texture"):
        return SAMPLED_IMAGE
    return None


def _push_block_size(body: str) -> int | None:
    """The std430 size of a push block of scalars, vectors and arrays of them (None for any
    other member: a struct, a matrix, an array whose length is not a number)."""
    end = 0
    for decl in body.split(";"):
        decl = decl.strip()
        if not decl:
            continue
        match = _MEMBER.match(decl)
        if match is None or match.group(1) not in _PUSH_TYPES:
            return None
        size, align = _PUSH_TYPES[match.group(1)]
        for name in decl[match.start(2) :].split(","):
            member = _MEMBER_NAME.fullmatch(name)
            if member is None:
                return None
            start = -(-end // align) * align
            if member.group(2) is None:
                end = start + size
            else:  # std430: an array's stride is its element's size rounded up to its alignment
                end = start + -(-size // align) * align * int(member.group(2))
    return end


@functools.lru_cache(maxsize=256)
def declared_interface(source: str) -> DeclaredInterface:
    """Read the interface off a compute shader's (include-expanded) GLSL source."""
    text = _COMMENT.sub(" ", source)
    bindings: list[Binding] | None = []
    read_only: set[int] = set()
    written: set[int] = set()  # declared once without readonly: read-only it is not
    push: int | None = 0
    spec_ids: set[int] | None = set()
    axes: dict[str, tuple[str, int | None]] = {}
    pos = 0
    while (match := _LAYOUT.search(text, pos)) is not None:
        pos = match.end()
        head, terminator = match.group(2), match.group(3)
        body = ""
        if terminator == "{":  # a block: its members' own layouts are not declarations here
            close = text.find("}", pos)
            body, pos = text[pos : close if close >= 0 else len(text)], max(close + 1, pos)
        quals = _qualifiers(match.group(1))
        if "constant_id" in quals:
            spec_ids = _with_id(spec_ids, quals["constant_id"])
        if "push_constant" in quals and push is not None:
            push = _push_block_size(body) if push == 0 else None  # two blocks: not guessed
        if "binding" in quals and bindings is not None:
            kind = _descriptor_type(head, terminator)
            number, group = quals["binding"], quals.get("set", 0)
            if kind is None or number is None or group is None or min(number, group) < 0:
                bindings = None
            else:
                found = Binding(group, number, kind)
                if found not in bindings:  # not a second view of one buffer
                    bindings.append(found)
                if kind == STORAGE_BUFFER and group == 0 and "readonly" in head.split():
                    read_only.add(number)
                else:
                    written.add(number)
        for axis in _AXES:
            if f"local_size_{axis}_id" in quals:
                value = quals[f"local_size_{axis}_id"]
                axes[axis] = ("id", value)
                spec_ids = _with_id(spec_ids, value)  # a local size id is a spec constant too
            elif f"local_size_{axis}" in quals:
                axes[axis] = ("fixed", quals[f"local_size_{axis}"])
    ids, fixed = _local_size([axes.get(a, ("fixed", 1)) for a in _AXES])
    return DeclaredInterface(
        bindings=None if bindings is None else tuple(sorted(bindings, key=_binding_order)),
        push_constant_size=push,
        specialization_ids=None if spec_ids is None else frozenset(spec_ids),
        local_size_ids=ids,
        local_size=fixed,
        read_only_bindings=frozenset(() if bindings is None else read_only - written),
    )


def _local_size(
    axes: list[tuple[str, int | None]],
) -> tuple[tuple[int, int, int] | None, tuple[int, int, int] | None]:
    """(spec ids, None) when all three axes are ``_id``s, (None, sizes) when all are fixed."""
    values = [v for _, v in axes if v is not None and v >= 0]
    if len(values) != 3:
        return None, None
    kinds = {kind for kind, _ in axes}
    triple = (values[0], values[1], values[2])
    if kinds == {"id"}:
        return triple, None
    if kinds == {"fixed"}:
        return None, triple
    return None, None  # mixed: glslang gives no id triple, and the sizes are partly constants


def _binding_order(b: Binding) -> tuple[int, int]:
    return (b.set, b.binding)


def _describe(bindings: tuple[Binding, ...]) -> str:
    return ", ".join(f"{b.set}.{b.binding} {b.descriptor_type}" for b in bindings) or "none"


def interface_mismatch(info: ShaderInfo, declared: DeclaredInterface) -> str | None:
    """Why a reflected SPIR-V body is not the shader its source declares, or None."""
    if info.entry_points != EXPECTED_ENTRY_POINTS:
        found = ", ".join(f"{e.name!r} (model {e.model})" for e in info.entry_points) or "none"
        return f"entry points {found}; expected one GLCompute 'main'"
    if declared.bindings is not None and info.bindings != declared.bindings:
        return (
            f"descriptor bindings [{_describe(info.bindings)}]; the source declares "
            f"[{_describe(declared.bindings)}]"
        )
    push = declared.push_constant_size
    if push is not None and info.push_constant_size != push:
        return f"a {info.push_constant_size}-byte push-constant block; the source declares {push}"
    if declared.specialization_ids is not None:
        extra = sorted(set(info.specialization_ids) - declared.specialization_ids)
        if extra:
            return f"specialization ids {extra}, which the source does not declare"
    if declared.local_size_ids is not None and info.local_size_ids != declared.local_size_ids:
        return (
            f"local size ids {info.local_size_ids}; the source declares {declared.local_size_ids}"
        )
    fixed = declared.local_size
    if fixed is not None and (info.local_size_ids is not None or info.local_size != fixed):
        got = f"ids {info.local_size_ids}" if info.local_size_ids else f"{info.local_size}"
        return f"local size {got}; the source fixes it to {fixed}"
    return None


__all__ = ("DeclaredInterface", "declared_interface", "interface_mismatch")
