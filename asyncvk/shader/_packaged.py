"""SPIR-V built at install: a cold load finds every builtin shader compiled, and compiles no GLSL.

Without it a cold start compiled each shader it needed (glslang's one-time set-up, 80-130 ms of
C, then 10-20 ms a shader) before the driver could build a pipeline from it. The install
compiles every builtin shader and shape variant for each option-bit combination a Net asks for
(``_packaged_build``), one file each, named by a hash of what was compiled: the source with its
option prelude, and the target and optimisation level. A lookup is one ``open()``; an edited
shader or prelude names no file, so it compiles as before.

Only shaders that test no device macro are built: their SPIR-V is the same on every device.
The manifest holds each file's blake2b, checked when it is read, and whether the build compiled
every shader. The cache then checks a body against its shader's declared interface before its
first use, as it does a cache file's, and compiles instead when a check fails.
``ASYNCVK_PACKAGED_SPIRV=0`` turns the folder off (every shader compiles at its first use).
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

from ._options import (
    BUILTIN_OPTIMIZATION,
    BUILTIN_TARGET_ENV,
    DEVICE_MACRO_NAMES,
    ShaderOptions,
    compilable_source,
)
from ._registry import source_hash

#: The folder the install writes (next to the compiler's extension, git-ignored in a checkout).
PACKAGED_DIR = Path(__file__).resolve().parent / "packaged_spirv"
#: Written last by the build: a header line, then ``<file name> <blake2b-128 hex>`` per file.
MANIFEST = "manifest"
MANIFEST_HEADER = "asyncvk packaged SPIR-V 1"
#: Option bits a Net can ask for: fp16 storage (bit 0) and fp16 arithmetic (bit 1).
PACKAGED_OPTION_BITS = (0, 1, 2, 3)
#: The largest body read (the largest builtin shader is about 60 KB): a bigger file is not ours.
MAX_BODY_BYTES = 1 << 20
ENV_SWITCH = "ASYNCVK_PACKAGED_SPIRV"


def packaged_enabled() -> bool:
    """Off only when ``ASYNCVK_PACKAGED_SPIRV`` says so (``0``, ``off``, ``false``, ``no``)."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "off", "false", "no")


def file_name(shader: str, options: ShaderOptions, source: str) -> str:
    """The file of a shader's SPIR-V under ``options``: named by a hash of what is compiled."""
    settings = f"target={BUILTIN_TARGET_ENV};optimization={BUILTIN_OPTIMIZATION}\n"
    text_hash = source_hash(settings + compilable_source(source, options))
    return f"{shader}.{options.bits:x}.{text_hash:016x}.spv"


def body_digest(body: bytes) -> str:
    return hashlib.blake2b(body, digest_size=16).hexdigest()


def uses_device_macros(source: str) -> bool:
    """Whether a shader's expanded source names a device macro (its SPIR-V is per device)."""
    return any(name in source for name in DEVICE_MACRO_NAMES)


def manifest_text(digests: dict[str, str], complete: bool) -> str:
    lines = [f"{MANIFEST_HEADER} complete={int(complete)} files={len(digests)}"]
    lines += [f"{name} {digest}" for name, digest in sorted(digests.items())]
    return "\n".join(lines) + "\n"


class _Manifest:
    """A folder's manifest, read once and again only when the file changes (a test rebuilds)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._read: dict[Path, tuple[tuple[int, int], bool, dict[str, str]]] = {}

    def get(self, folder: Path) -> tuple[bool, dict[str, str]] | None:
        """(complete, digest by file name), or None when there is no readable manifest."""
        path = folder / MANIFEST
        try:
            stat = path.stat()
        except OSError:
            return None
        stamp = (stat.st_mtime_ns, stat.st_size)
        with self._lock:
            known = self._read.get(folder)
            if known is not None and known[0] == stamp:
                return known[1], known[2]
        parsed = _parse_manifest(path)
        if parsed is None:
            return None
        with self._lock:
            self._read[folder] = (stamp, *parsed)
        return parsed


def _parse_manifest(path: Path) -> tuple[bool, dict[str, str]] | None:
    try:
        lines = path.read_text(encoding="ascii").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    if not lines or not lines[0].startswith(MANIFEST_HEADER + " "):
        return None
    complete = " complete=1 " in f"{lines[0]} "
    digests = {}
    for line in lines[1:]:
        name, _, digest = line.partition(" ")
        if len(digest) == 32:
            digests[name] = digest
    return complete, digests


_manifests = _Manifest()


def packaged_complete(directory: Path | None = None) -> bool:
    """Whether the install built the folder (default ``PACKAGED_DIR``) with every shader, and
    it is on: a cold load then compiles nothing, so nothing needs glslang's set-up. (A shader
    edited in a checkout since then compiles at its first use, without the set-up started.)"""
    if not packaged_enabled():
        return False
    manifest = _manifests.get(directory or PACKAGED_DIR)
    return manifest is not None and manifest[0]


def _listed(
    shader: str, options: ShaderOptions, source: str, folder: Path
) -> tuple[str, str] | None:
    """(file name, blake2b) of a shader's body in the manifest; None when there is none to use
    (switched off, a device-macro shader, not built, or edited since)."""
    if not packaged_enabled() or uses_device_macros(source):
        return None
    manifest = _manifests.get(folder)
    name = file_name(shader, options, source)
    digest = None if manifest is None else manifest[1].get(name)
    return None if digest is None else (name, digest)


def packaged_digest(
    shader: str, options: ShaderOptions, source: str, directory: Path | None = None
) -> str | None:
    """The blake2b the install's manifest names for a shader's SPIR-V under ``options``, read
    whether or not the folder is switched on: the authority on what a builtin body must be.
    None where the install built none (a device-macro shader, an edited source, no folder)."""
    if uses_device_macros(source):
        return None
    manifest = _manifests.get(directory or PACKAGED_DIR)
    return None if manifest is None else manifest[1].get(file_name(shader, options, source))


def read_packaged(
    shader: str, options: ShaderOptions, source: str, directory: Path | None = None
) -> bytes | str | None:
    """The packaged SPIR-V of a shader; None when there is none to use (switched off, a
    device-macro shader, not in the manifest: not built, or edited since); or, as a string,
    why the file there is bad (unreadable, oversized, or not the bytes the manifest names)."""
    folder = directory or PACKAGED_DIR
    listed = _listed(shader, options, source, folder)
    if listed is None:
        return None
    name, digest = listed
    try:
        with open(folder / name, "rb") as f:
            body = f.read(MAX_BODY_BYTES + 1)
    except OSError as exc:
        return f"{name} unreadable: {exc.strerror or exc}"
    if len(body) > MAX_BODY_BYTES:
        return f"{name} is over {MAX_BODY_BYTES} bytes"
    if body_digest(body) != digest:
        return f"{name} is not the file the install wrote (its blake2b differs from the manifest)"
    return body


def packaged_state(directory: Path | None = None) -> dict[str, object]:
    """What ``asyncvk info`` reports: the folder, whether it is on, how many shaders the
    install built (None: no manifest) and whether it built every one."""
    folder = directory or PACKAGED_DIR
    manifest = _manifests.get(folder)
    return {
        "folder": str(folder),
        "enabled": packaged_enabled(),
        "shaders": None if manifest is None else len(manifest[1]),
        "complete": manifest is not None and manifest[0],
    }
