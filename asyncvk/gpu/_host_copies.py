"""Large host copies split over threads: numpy lets go of the GIL while it copies, so a few
threads move the bytes a core alone would take milliseconds over (about 10 GB/s a core into an
H100's mapped device memory).

``copy_bytes`` splits one large copy (a model's weights: vgg16's 553 MB); ``copy_all`` spreads
many (a batch's items, each into its own staging buffer: 32 images of 3x224x224 are 20 MB,
about 2 ms of one core before the batch reaches the GPU).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .._threads import thread_pool

if TYPE_CHECKING:  # numpy is imported where it is used: the device opens without it
    import numpy as np

#: Copies of at least this many bytes are split over COPY_THREADS threads.
PARALLEL_COPY_BYTES = 32 << 20
#: Several copies that come to at least this many bytes are spread over COPY_THREADS threads.
PARALLEL_COPIES_BYTES = 4 << 20
COPY_THREADS = 4


def copy_bytes(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[:] = src`` for two uint8 arrays, in page-aligned parts on threads when large."""
    import numpy as np

    n = src.nbytes
    if n < PARALLEL_COPY_BYTES or COPY_THREADS <= 1:
        np.copyto(dst, src)
        return
    step = -(-n // COPY_THREADS)
    step = (step + 4095) // 4096 * 4096
    _on_threads([[(dst[i : i + step], src[i : i + step])] for i in range(0, n, step)])


def copy_all(pairs: Sequence[tuple[np.ndarray, np.ndarray]]) -> None:
    """``dst[:] = src`` for each (dst, src) pair of equal shapes; pairs that come to
    PARALLEL_COPIES_BYTES are spread over the threads, each thread a share of similar size."""
    import numpy as np

    total = sum(src.nbytes for _, src in pairs)
    if total < PARALLEL_COPIES_BYTES or len(pairs) < 2 or COPY_THREADS <= 1:
        for dst, src in pairs:
            np.copyto(dst, src)
        return
    shares: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in range(COPY_THREADS)]
    loads = [0] * COPY_THREADS
    for pair in sorted(pairs, key=lambda p: -p[1].nbytes):  # largest first, to the lightest
        lightest = loads.index(min(loads))
        shares[lightest].append(pair)
        loads[lightest] += pair[1].nbytes
    _on_threads([share for share in shares if share])


def _copy_each(share: list[tuple[np.ndarray, np.ndarray]]) -> None:
    import numpy as np

    for dst, src in share:
        np.copyto(dst, src)


def _on_threads(shares: list[list[tuple[np.ndarray, np.ndarray]]]) -> None:
    """Each share's copies on a copy thread; returns once every share has ended, raising the
    first failure."""
    pool = thread_pool("copy", COPY_THREADS)
    parts: list[concurrent.futures.Future[None]] = []
    try:
        for share in shares:
            parts.append(pool.submit(_copy_each, share))
    except RuntimeError:  # the interpreter is shutting down: no new threads, copy here
        for share in shares[len(parts) :]:
            _copy_each(share)
    finally:
        # every part has ended before this returns or raises: the caller may free dst then
        concurrent.futures.wait(parts)
    for future in parts:
        future.result()
