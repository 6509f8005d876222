"""Builtin shaders: every ``shaders/*.comp`` file, named by its stem, with a source hash.

Names are stable (a file name, not an index that shifts when a shader is added), and the hash
of each source is part of its SPIR-V cache key, so an edited shader never reuses stale SPIR-V.
"""

from __future__ import annotations

import hashlib
import threading
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


@dataclass(frozen=True)
class BuiltinShader:
    name: str
    source: str
    source_hash: int


class ShaderRegistry:
    """Loads builtin shaders lazily and once; thread-safe."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory or shader_dir()
        self._lock = threading.Lock()
        self._shaders: dict[str, BuiltinShader] | None = None

    def _load(self) -> dict[str, BuiltinShader]:
        if self._shaders is None:
            with self._lock:
                if self._shaders is None:
                    shaders = {}
                    for path in sorted(self.directory.glob("*.comp")):
                        text = self._expand(path.read_text(encoding="utf-8"), path.name)
                        shaders[path.stem] = BuiltinShader(path.stem, text, source_hash(text))
                    self._shaders = shaders
        return self._shaders

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

    def get(self, name: str) -> BuiltinShader:
        try:
            return self._load()[name]
        except KeyError:
            raise KeyError(f"no builtin shader named {name!r} in {self.directory}") from None

    def names(self) -> tuple[str, ...]:
        return tuple(self._load())

    def source_hashes(self) -> dict[str, int]:
        return {name: s.source_hash for name, s in self._load().items()}

    def __contains__(self, name: object) -> bool:
        return name in self._load()


_default: ShaderRegistry | None = None


def builtin_shaders() -> ShaderRegistry:
    """The registry over the package's own shaders."""
    global _default
    if _default is None:
        _default = ShaderRegistry()
    return _default
