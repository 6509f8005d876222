"""Reading a cache source (path, bytes or binary file) within a size limit, and describing a
file for ``asyncvk cache inspect``: every field and entry, with what is wrong where."""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from typing import Any, BinaryIO

from ._file_entries import (
    _check_sections,
    _judge,
    _parse_index,
    _Sections,
    decode_cache,
)
from ._file_format import (
    HEADER_SIZE,
    MAX_FILE_SIZE,
    CacheLoadResult,
    _check_prefix,
    _unpack_header,
)

# -- reading ---------------------------------------------------------------------------------


def _too_big(what: str, size: int, max_size: int) -> CacheLoadResult:
    return CacheLoadResult(False, f"{what} has {size} bytes, over the {max_size}-byte size limit")


def _read_path(path: str, max_size: int) -> bytes | CacheLoadResult:
    # O_NONBLOCK: opening a FIFO must not hang; fstat then refuses anything but a regular file.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            return CacheLoadResult(False, f"{path} is a directory, not a cache file")
        if not stat.S_ISREG(st.st_mode):
            return CacheLoadResult(False, f"{path} is not a regular file")
        if st.st_size > max_size:
            return _too_big(path, st.st_size, max_size)
        chunks = []
        total = 0
        while total <= max_size:
            chunk = os.read(fd, min(max_size + 1 - total, 16 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    finally:
        os.close(fd)
    if total > max_size:
        return CacheLoadResult(False, f"{path} grew past the {max_size}-byte size limit")
    return b"".join(chunks)


def _read_stream(source: BinaryIO, max_size: int) -> bytes | CacheLoadResult:
    try:
        st = os.fstat(source.fileno())
        remaining = st.st_size - source.tell()
        if stat.S_ISREG(st.st_mode) and remaining > max_size:
            return _too_big("the cache file object", remaining, max_size)
    except (OSError, ValueError, AttributeError):
        pass  # no file descriptor (BytesIO, sockets): the bounded read below still applies
    data = source.read(max_size + 1)
    if not isinstance(data, (bytes, bytearray)):
        return CacheLoadResult(False, "the cache file object is not open in binary mode")
    if len(data) > max_size:
        return CacheLoadResult(False, f"the cache file object is over the {max_size}-byte limit")
    return bytes(data)


def read_cache_source(
    source: str | os.PathLike[str] | bytes | bytearray | memoryview | BinaryIO,
    *,
    max_size: int = MAX_FILE_SIZE,
) -> bytes | CacheLoadResult:
    """The bytes of a cache file, or a failed result saying why they cannot be had.

    ``bytes`` are the file's contents, not a path. A file's size is checked with ``fstat``
    before anything is read, so a huge (or sparse) file costs nothing.
    """
    if isinstance(source, (bytes, bytearray, memoryview)):
        if len(source) > max_size:
            return _too_big("the cache data", len(source), max_size)
        return bytes(source)
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        try:
            return _read_path(os.fsdecode(path), max_size)
        except FileNotFoundError:
            return CacheLoadResult(False, f"{path} does not exist")
        except PermissionError as exc:
            return CacheLoadResult(False, f"cannot read {path}: {exc.strerror} (permission)")
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
            return CacheLoadResult(False, f"cannot read {path}: {reason}")
    try:
        return _read_stream(source, max_size)
    except (OSError, ValueError) as exc:
        return CacheLoadResult(False, f"cannot read the cache file object: {exc}")


# -- inspection ------------------------------------------------------------------------------


def _jsonable_header(h: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field, value in h.items():
        if field == "magic":
            out[field] = value.decode("latin-1")
        elif field == "endian":
            out[field] = f"0x{value:08x}"
        elif field == "asyncvk_version":
            out[field] = value.rstrip(b"\0").decode("utf-8", "replace")
        elif isinstance(value, bytes):
            out[field] = value.hex()
        elif field.endswith("_hash"):
            out[field] = f"{value:016x}"
        else:
            out[field] = value
    return out


def describe_cache(data: bytes) -> dict[str, Any]:
    """Header fields, section layout and every entry, JSON-ready (``asyncvk cache inspect``).

    Describes damaged files too, as far as they can be read; raises ValueError only when the
    data has no header of this format version to describe.
    """
    view = memoryview(data).cast("B")
    problem = _check_prefix(view)
    if problem is not None:
        raise ValueError(problem)
    h = _unpack_header(view)
    result, _ = decode_cache(data, expected=None, source_hashes=None)
    info: dict[str, Any] = {
        "size": len(view),
        "valid": bool(result),
        "reason": result.reason,
        "header": _jsonable_header(h),
        "layout": {},
        "spirv_entries": [],
        "skipped": list(result.skipped),
        "driver_blob_bytes": h["driver_blob_size"],
    }
    start = 0
    for section, size in (
        ("header", HEADER_SIZE),
        ("spirv_index", h["index_size"]),
        ("spirv_bodies", h["bodies_size"]),
        ("driver_blob", h["driver_blob_size"]),
    ):
        info["layout"][section] = [start, start + size]
        start += size
    sections = _check_sections(view, h)
    records = _parse_index(h, sections) if isinstance(sections, _Sections) else []
    if isinstance(records, str):
        records = []
    for rec, problem in zip(records, _judge(records, None), strict=True):
        info["spirv_entries"].append(
            {
                "shader": rec.name,
                "option_bits": rec.option_bits,
                "source_hash": f"{rec.source_hash:016x}",
                "macro_hash": f"{rec.macro_hash:016x}",
                "size": len(rec.body),
                "entry_hash": rec.digest.hex(),
                "status": problem or "ok",
            }
        )
    return info
