"""Builtin shaders: every ``shaders/*.comp`` file, named by its stem, with a source hash.

Names are stable (a file name, not an index that shifts when a shader is added), and the hash
of each source is part of its SPIR-V cache key, so an edited shader never reuses stale SPIR-V.
"""

from __future__ import annotations

import hashlib
import re
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

_PACKAGE_SHADERS = Path(__file__).resolve().parent.parent / "shaders"
_SOURCE_TREE_SHADERS = Path(__file__).resolve().parent.parent.parent / "shaders"


def shader_dir() -> Path:
    """Where builtin shaders live: inside the installed package, or the source tree."""
    if _PACKAGE_SHADERS.is_dir():
        return _PACKAGE_SHADERS
    return _SOURCE_TREE_SHADERS


def source_hash(source: str) -> int:
    """A 64-bit hash of a shader's source text (never 0: 0 means "not cacheable")."""
    digest = hashlib.blake2b(source.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") or 1


#: Suffix of a shader's shape-baked variant: push constants become specialization constants.
SHAPES_SUFFIX = "@shapes"
#: Specialization id of push member i in a shape variant (4 bytes at push offset 4 * i).
BAKED_PUSH_BASE_ID = 100

_PUSH_BLOCK = re.compile(
    r"layout\s*\(\s*push_constant\s*\)\s*uniform\s+\w+\s*\{(?P<body>[^}]*)\}\s*p\s*;"
)
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
_MEMBER = re.compile(r"(int|float)\s+(\w+)")
_PUSH_USE = re.compile(r"\bp\.(\w+)\b")


@dataclass(frozen=True)
class BuiltinShader:
    name: str
    source: str
    source_hash: int


def shape_variant_source(source: str) -> str | None:
    """The source with ``p.<member>`` push constants turned into specialization constants.

    Member i becomes ``layout(constant_id = 100 + i) const <type> avk_p_<member>``, so the
    pipeline's constant data can be the push bytes themselves. None when the shader has no
    ``... } p;`` push block, or one whose members are not all int/float scalars.
    """
    blocks = list(_PUSH_BLOCK.finditer(source))
    if len(blocks) != 1:
        return None
    block = blocks[0]
    members: list[tuple[str, str]] = []
    for decl in _COMMENT.sub(" ", block.group("body")).split(";"):
        decl = decl.strip()
        if not decl:
            continue
        for part in decl.split(","):  # "int w, h" declares two members of one type
            part = part.strip()
            match = _MEMBER.fullmatch(part)
            if match is None and members and re.fullmatch(r"\w+", part):
                match = _MEMBER.fullmatch(f"{members[-1][0]} {part}")
            if match is None:
                return None  # a vector, array or other non-scalar member
            members.append((match.group(1), match.group(2)))
    if not members:
        return None
    names = {name for _, name in members}
    body = source[: block.start()] + "\0" + source[block.end() :]
    if any(m.group(1) not in names for m in _PUSH_USE.finditer(body)):
        return None
    decls = " ".join(
        f"layout(constant_id = {BAKED_PUSH_BASE_ID + i}) const {kind} avk_p_{name} = "
        f"{'0' if kind == 'int' else '0.0'};"
        for i, (kind, name) in enumerate(members)
    )
    decls += "\n" * block.group(0).count("\n")  # keep later line numbers as written
    body = _PUSH_USE.sub(lambda m: f"avk_p_{m.group(1)}", body)
    return body.replace("\0", decls, 1)


class ShaderRegistry:
    """Loads builtin shaders lazily, each on its first use, and once; thread-safe.

    A warm load uses a handful of the shaders: reading, expanding and hashing every one (and
    deriving every shape variant) took 8 ms of a warm CLI run's cache load on lavapipe's machine.
    """

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or shader_dir()
        self._lock = threading.Lock()
        self._listed: tuple[str, ...] | None = None
        self._shaders: dict[str, BuiltinShader] = {}
        self._variants: dict[str, BuiltinShader | None] = {}

    def _names(self) -> tuple[str, ...]:
        """Every shader's name, in file-name order (the folder is listed once, nothing read)."""
        if self._listed is None:
            files = sorted(p.name for p in self.directory.glob("*.comp"))
            self._listed = tuple(f.removesuffix(".comp") for f in files)
        return self._listed

    def _base(self, name: str) -> BuiltinShader | None:
        """The shader of file ``<name>.comp``, read on first use; None when there is none."""
        with self._lock:
            found = self._shaders.get(name)
            if found is None and name in self._names():
                path = self.directory / f"{name}.comp"
                text = self._expand(path.read_text(encoding="utf-8"), path.name)
                found = self._shaders[name] = BuiltinShader(name, text, source_hash(text))
            return found

    def _expand(self, text: str, name: str) -> str:
        """Inline ``#include "x.h"`` lines from the shader folder (hashed with the source)."""
        out = []
        for number, line in enumerate(text.split("\n"), start=1):
            stripped = line.strip()
            if stripped.startswith("#include"):
                target = stripped[len("#include") :].strip().strip('"<>')
                path = self.directory / target
                if not path.is_file():
                    raise FileNotFoundError(f"{name}:{number}: include {target!r} not found")
                out.append(path.read_text(encoding="utf-8").rstrip("\n"))
                out.append(f"#line {number + 1}")
            else:
                out.append(line)
        return "\n".join(out)

    def _variant(self, name: str) -> BuiltinShader | None:
        """The ``<name>@shapes`` variant, derived once (None when the shader has none)."""
        with self._lock:
            if name in self._variants:
                return self._variants[name]
        variant = None
        if name.endswith(SHAPES_SUFFIX):
            base = self._base(name.removesuffix(SHAPES_SUFFIX))
            text = None if base is None else shape_variant_source(base.source)
            if text is not None:
                variant = BuiltinShader(name, text, source_hash(text))
        with self._lock:
            self._variants[name] = variant
        return variant

    def get(self, name: str) -> BuiltinShader:
        found = self._base(name) or self._variant(name)
        if found is None:
            raise KeyError(f"no builtin shader named {name!r} in {self.directory}")
        return found

    def shape_variant(self, name: str) -> str | None:
        """The name of ``name``'s shape-baked variant, or None when it cannot have one."""
        variant = f"{name}{SHAPES_SUFFIX}"
        return variant if self._variant(variant) is not None else None

    def names(self) -> tuple[str, ...]:
        return self._names()

    def source_hashes(self) -> dict[str, int]:
        """Every shader's source hash, shape variants included (cache files may hold them)."""
        hashes = {name: self.get(name).source_hash for name in self._names()}
        for name in list(hashes):
            variant = self._variant(f"{name}{SHAPES_SUFFIX}")
            if variant is not None:
                hashes[variant.name] = variant.source_hash
        return hashes

    def source_hash_view(self) -> Mapping[str, int]:
        """:meth:`source_hashes` as a mapping that hashes a shader when it is looked up: a
        cache file's check reads only the shaders its entries name."""
        return _SourceHashes(self)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        return self._base(name) is not None or self._variant(name) is not None


class _SourceHashes(Mapping[str, int]):
    """A registry's source hash by shader name, shape variants included, computed on lookup."""

    def __init__(self, registry: ShaderRegistry) -> None:
        self._registry = registry

    def __getitem__(self, name: str) -> int:
        if name not in self._registry:
            raise KeyError(name)
        return self._registry.get(name).source_hash

    def __iter__(self) -> Iterator[str]:
        return iter(self._registry.source_hashes())

    def __len__(self) -> int:
        return len(self._registry.source_hashes())


_default: ShaderRegistry | None = None


def builtin_shaders() -> ShaderRegistry:
    """The registry over the package's own shaders."""
    global _default
    if _default is None:
        _default = ShaderRegistry()
    return _default
