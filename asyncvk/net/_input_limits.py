"""Sizes checked before anything is allocated.

An input's size is known before its bytes are: a .npy header declares a shape, ``--shape`` names
one, a plan adds up its blobs. Each is checked here against what can hold it, so a 4 KB file
whose header claims 112 GiB is a one-line error that names the input, the size and the limit,
instead of a MemoryError traceback (or, with overcommit, the OOM killer) half-way through.

The limits, in the order they are checked:

- the bytes that hold it: a .npy file or request body must hold what its header declares;
- ``MAX_INPUT_BYTES`` (4 GiB; the environment variable ``ASYNCVK_MAX_INPUT_BYTES`` changes it):
  an input is bound as one storage buffer, and ``maxStorageBufferRange`` is a 32-bit field, so
  no Vulkan device addresses more in one binding;
- the host's available memory (``MemAvailable`` in /proc/meminfo), which every input passes
  through. A container's own memory limit is not read: set ``ASYNCVK_MAX_INPUT_BYTES`` there.

A plan's arena (the blobs one inference holds at once) is checked against the device's heap
when the device has memory of its own, and against the host's available memory when its
"device" memory is host memory (lavapipe, integrated GPUs), where an allocation too large for
the host is not refused by the driver but by the OOM killer later.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

import numpy as np
from numpy.lib import format as npy_format

from .._errors import InputError, InputTooLargeError

if TYPE_CHECKING:
    import zipfile

MAX_INPUT_BYTES = 4 << 30
MAX_INPUT_BYTES_ENV = "ASYNCVK_MAX_INPUT_BYTES"
#: dtype kinds an input may have: float, signed and unsigned int (converted to float32).
NUMBER_KINDS = "fiu"


#: An input this small is taken without asking the host how much memory it has left: reading
#: ``/proc/meminfo`` cost a server 80 us a request (a fifth of its host time for a small model),
#: and a host that cannot find 16 MiB could not have loaded the model.
ALWAYS_AVAILABLE_BYTES = 16 << 20


def format_bytes(nbytes: int) -> str:
    """``112 GiB``, ``48 MiB``: three significant digits, binary units."""
    for unit, shift in (("PiB", 50), ("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.3g} {unit}"
    return f"{nbytes} bytes"


def host_available_bytes() -> int | None:
    """Memory the host can give without swapping (``MemAvailable``); None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def max_input_bytes() -> int:
    """The cap on one input: ``ASYNCVK_MAX_INPUT_BYTES`` when set, else ``MAX_INPUT_BYTES``."""
    raw = os.environ.get(MAX_INPUT_BYTES_ENV)
    if raw is None or not raw.strip():
        return MAX_INPUT_BYTES
    try:
        value = int(raw)
    except ValueError:
        raise InputError(f"{MAX_INPUT_BYTES_ENV}={raw!r}: expected a number of bytes") from None
    if value <= 0:
        raise InputError(f"{MAX_INPUT_BYTES_ENV}={raw!r}: expected a positive number of bytes")
    return value


def check_input_size(where: str, shape: Sequence[int], dtype: np.dtype | type = np.float32) -> int:
    """Refuse an input of ``shape`` over a limit; returns the bytes it needs.

    The bytes counted are the larger of its own and its float32 copy's, since both exist while
    it is converted. ``where`` names the input in the message (``in0=huge.npy``, ``in0``).
    """
    dims = tuple(int(d) for d in shape)
    if not dims or min(dims) <= 0:
        raise InputError(f"{where}: shape {dims} must have positive dims")
    dt = np.dtype(dtype)
    nbytes = math.prod(dims) * max(dt.itemsize, 4)
    cap = max_input_bytes()
    if nbytes > cap:
        limit = f"the {format_bytes(cap)} input limit ({MAX_INPUT_BYTES_ENV})"
        raise InputTooLargeError(
            f"{where}: shape {dims} {dt} needs {format_bytes(nbytes)}, over {limit}",
            nbytes=nbytes,
            limit=cap,
        )
    available = host_available_bytes() if nbytes > ALWAYS_AVAILABLE_BYTES else None
    if available is not None and nbytes > available:
        raise InputTooLargeError(
            f"{where}: shape {dims} {dt} needs {format_bytes(nbytes)}, over the "
            f"{format_bytes(available)} of memory this host has available",
            nbytes=nbytes,
            limit=available,
        )
    return nbytes


@dataclass(frozen=True)
class NpyHeader:
    shape: tuple[int, ...]
    dtype: np.dtype
    #: where the array's bytes start
    offset: int

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


def read_npy_header(f: IO[bytes], where: str) -> NpyHeader:
    """The header of a .npy stream, without reading the array."""
    try:
        major, _ = npy_format.read_magic(f)
        if major == 1:
            shape, _, dtype = npy_format.read_array_header_1_0(f)
        else:  # 2.0 and 3.0 share the layout (3.0 only allows utf-8 field names)
            shape, _, dtype = npy_format.read_array_header_2_0(f)
    except (ValueError, OSError, EOFError, SyntaxError) as exc:
        raise InputError(f"{where}: not a valid .npy file: {exc}") from None
    if dtype.kind not in NUMBER_KINDS or dtype.hasobject:
        raise InputError(f"{where}: dtype {dtype} is not a real number type")
    return NpyHeader(tuple(int(d) for d in shape), dtype, f.tell())


def check_npy(where: str, header: NpyHeader, total: int, holder: str) -> None:
    """The header's declared size against the ``total`` bytes that hold it, then the limits."""
    declared = header.nbytes
    dims = header.shape
    if dims and min(dims) <= 0:
        raise InputError(f"{where}: header declares shape {dims}: dims must be positive")
    if declared > total - header.offset:
        raise InputError(
            f"{where}: header declares shape {dims} {header.dtype} = {format_bytes(declared)} "
            f"but the {holder} holds {total:,} bytes"
        )
    check_input_size(where, dims or (1,), header.dtype)


def load_npy_file(where: str, path: str | os.PathLike[str]) -> np.ndarray:
    """A .npy file's array, refused before allocating when its header does not fit."""
    with open(path, "rb") as f:
        header = read_npy_header(f, where)
        check_npy(where, header, os.fstat(f.fileno()).st_size, "file")
    return _load(where, path)


def load_npy_bytes(where: str, data: bytes, holder: str = "body") -> np.ndarray:
    """A .npy held in ``data`` (a request body or part), checked as :func:`load_npy_file`."""
    header = read_npy_header(io.BytesIO(data), where)
    check_npy(where, header, len(data), holder)
    return _load(where, io.BytesIO(data))


def load_npz_member(where: str, archive: zipfile.ZipFile, member: str) -> np.ndarray:
    """One array of an .npz archive, checked as :func:`load_npy_file` against the member's
    uncompressed size before it is read."""
    info = archive.getinfo(member)
    with archive.open(info) as f:
        header = read_npy_header(f, where)
    check_npy(where, header, info.file_size, "archive member")
    with archive.open(info) as f:
        return _load(where, f)


def _load(where: str, source: str | os.PathLike[str] | IO[bytes]) -> np.ndarray:
    try:
        array = np.load(source, allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise InputError(f"{where}: not a valid .npy file: {exc}") from None
    if not isinstance(array, np.ndarray):
        raise InputError(f"{where}: not a .npy file (an .npz archive?)")
    return array


def check_plan_fits(nbytes: int, *, device_heap: int, unified_memory: bool, inputs: str) -> None:
    """Refuse a plan whose arena cannot fit where its blobs would live (see the module doc)."""
    if unified_memory:
        available = host_available_bytes()
        if available is not None and nbytes > available:
            raise InputTooLargeError(
                f"inputs {inputs} need {format_bytes(nbytes)} of blobs at once, over the "
                f"{format_bytes(available)} of memory this host has available (the device's "
                "memory is host memory)",
                nbytes=nbytes,
                limit=available,
            )
    elif device_heap > 0 and nbytes > device_heap:
        raise InputTooLargeError(
            f"inputs {inputs} need {format_bytes(nbytes)} of blobs at once, over the device's "
            f"{format_bytes(device_heap)} memory heap",
            nbytes=nbytes,
            limit=device_heap,
        )
