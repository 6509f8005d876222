"""One reader of a model file given as a path, its bytes or a file object (``.param`` and
``.bin`` alike), so the two parsers and ``Net`` agree on what each form means and what an
unreadable one raises."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Any

from .._errors import ModelFormatError
from .._threads import run_sync
from ..cache._safe_fs import expand_path

#: A model file as a load keeps it: a path (``~`` expanded) or the file's bytes.
ModelSource = str | bytes


def read_model_file(source: object, kind: str, *, text: bool = False) -> tuple[str, bytes | str]:
    """(name for errors, content) of ``source``, a ``kind`` file (".param", ".bin").

    A path that cannot be read raises the OSError that names it (``FileNotFoundError`` for a
    missing file); anything else unreadable is a ModelFormatError. A file object's ``read()``
    may return str only when ``text``.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        return "<bytes>", bytes(source)
    if isinstance(source, (str, os.PathLike)):
        name = os.fsdecode(source)
        try:
            return name, Path(source).read_bytes()
        except (OSError, ValueError) as exc:
            if isinstance(exc, OSError) and "\n" not in name:
                raise  # FileNotFoundError, PermissionError, ...: an OSError naming the path
            hint = " (pass bytes, not str, for file content)" if "\n" in name else ""
            reason = getattr(exc, "strerror", None) or exc
            raise ModelFormatError(f"cannot read: {reason}{hint}", file=name[:200]) from exc
    read = getattr(source, "read", None)
    if read is None:
        raise ModelFormatError(f"cannot read a {kind} from {type(source).__name__}")
    file_name = getattr(source, "name", None)
    name = file_name if isinstance(file_name, str) else "<bytes>"
    try:
        raw = read()
    except (OSError, ValueError) as exc:
        raise ModelFormatError(f"cannot read: {exc}", file=name) from exc
    if isinstance(raw, bytearray):
        raw = bytes(raw)
    if not isinstance(raw, (bytes, str)) or (isinstance(raw, str) and not text):
        mode = "" if text else f" (open the {kind} in 'rb' mode)"
        raise ModelFormatError(f"read() returned {type(raw).__name__}, not bytes{mode}", file=name)
    return name, raw


async def model_source(source: str | os.PathLike[str] | bytes | IO[Any], kind: str) -> ModelSource:
    """What a load keeps of ``source``: a path, ``~`` expanded as a shell would, or bytes. A
    file object is read on a worker thread, never on the event loop's (its file may be on a
    slow disk or a network)."""
    if isinstance(source, (str, os.PathLike)):
        return expand_path(source)
    if isinstance(source, bytes):
        return source

    def read() -> bytes:
        raw = read_model_file(source, kind, text=True)[1]
        return raw.encode() if isinstance(raw, str) else raw

    return await run_sync(read)
