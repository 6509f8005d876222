"""Handing the C heap's free memory back to the OS once a burst is over."""

from __future__ import annotations

from typing import Any


def give_free_heap_back() -> None:
    """Hand the C heap's free memory back to the OS (glibc's ``malloc_trim``; elsewhere
    nothing). A burst's request bodies and arrays are freed when it ends, but glibc keeps
    what it freed (its mmap threshold rises with the sizes it has seen), so RSS would stay at
    the burst's peak until the next burst reuses it."""
    global _malloc_trim
    if _malloc_trim is None:
        import ctypes  # once, after a first burst: not on the way to a first result

        try:
            _malloc_trim = ctypes.CDLL(None).malloc_trim
        except (AttributeError, OSError):  # not glibc
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Any = None
