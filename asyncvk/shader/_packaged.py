"""SPIR-V built at install: a cold load finds every builtin shader compiled, and compiles no GLSL.

Without it a cold start compiled each shader it needed (glslang's one-time set-up, 80-130 ms of
C, then 10-20 ms a shader) before the driver could build a pipeline from it. The install
compiles every builtin shader and shape variant for each option-bit combination a Net asks for
(``_packaged_build``), one file each, named by a hash of the exact text compiled (the source
with its option prelude): a lookup is one ``open()``, and an edited shader or prelude names no
file, so it compiles as before.

Only shaders that test no device macro are built: their SPIR-V is the same on every device.
The cache checks a body against its shader's declared interface before its first use, as it
does a cache file's, and compiles instead when the check fails. ``ASYNCVK_PACKAGED_SPIRV=0``
turns the folder off (every shader compiles at its first use, as before).
"""

from __future__ import annotations

import os
from pathlib import Path

from ._options import DEVICE_MACRO_NAMES, ShaderOptions, compilable_source
from ._registry import source_hash

#: The folder the install writes (next to the compiler's extension, git-ignored in a checkout).
PACKAGED_DIR = Path(__file__).resolve().parent / "packaged_spirv"
#: Written last by the build, holding the number of files: the folder is complete.
MANIFEST = "complete"
#: Option bits a Net can ask for: fp16 storage (bit 0) and fp16 arithmetic (bit 1).
PACKAGED_OPTION_BITS = (0, 1, 2, 3)
#: The largest body read (the largest builtin shader is about 60 KB): a bigger file is not ours.
MAX_BODY_BYTES = 1 << 20
ENV_SWITCH = "ASYNCVK_PACKAGED_SPIRV"


def packaged_enabled() -> bool:
    """Off only when ``ASYNCVK_PACKAGED_SPIRV`` says so (``0``, ``off``, ``false``, ``no``)."""
    return os.environ.get(ENV_SWITCH, "1").strip().lower() not in ("0", "off", "false", "no")


def file_name(shader: str, options: ShaderOptions, source: str) -> str:
    """The file of a shader's SPIR-V under ``options``: named by the hash of the text compiled."""
    text_hash = source_hash(compilable_source(source, options))
    return f"{shader}.{options.bits:x}.{text_hash:016x}.spv"


def uses_device_macros(source: str) -> bool:
    """Whether a shader's expanded source names a device macro (its SPIR-V is per device)."""
    return any(name in source for name in DEVICE_MACRO_NAMES)


def packaged_complete(directory: Path | None = None) -> bool:
    """Whether the install built the folder (default ``PACKAGED_DIR``) to the end, and it is
    switched on: a cold load then compiles nothing, so nothing needs glslang's set-up."""
    return packaged_enabled() and ((directory or PACKAGED_DIR) / MANIFEST).is_file()


def packaged_state(directory: Path | None = None) -> dict[str, object]:
    """What ``asyncvk info`` reports: the folder, whether it is on, and how many shaders the
    install's build wrote (None: not built, or not to the end)."""
    folder = directory or PACKAGED_DIR
    try:
        built: int | None = int((folder / MANIFEST).read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        built = None
    return {"folder": str(folder), "enabled": packaged_enabled(), "shaders": built}


def read_packaged(
    shader: str, options: ShaderOptions, source: str, directory: Path | None = None
) -> bytes | None:
    """The packaged SPIR-V of a shader, or None: switched off, a device-macro shader, no such
    file (not built, or the shader was edited since), unreadable, or not plausibly SPIR-V."""
    if not packaged_enabled() or uses_device_macros(source):
        return None
    try:
        path = (directory or PACKAGED_DIR) / file_name(shader, options, source)
        with open(path, "rb") as f:
            body = f.read(MAX_BODY_BYTES + 1)
    except OSError:
        return None
    if len(body) > MAX_BODY_BYTES or len(body) < 20 or len(body) % 4:
        return None
    return body
