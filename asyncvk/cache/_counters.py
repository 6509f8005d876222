"""What a pipeline cache counts, its generation, and its build log: shared by its parts.

Each part of the cache (SPIR-V store, driver blob, live pipelines, builds) counts what it does
here, under this object's own lock, so no part reaches into another's state to report.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Mapping

from ._statistics import BuildRecord, CacheStatistics


class CacheCounters:
    """Counters by :class:`CacheStatistics` field name, a generation that bumps whenever the
    cache holds something new (autosave watches it), and the latest 4096 builds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[str, float] = dict.fromkeys(CacheStatistics.__dataclass_fields__, 0)
        self._generation = 0
        self._builds: deque[BuildRecord] = deque(maxlen=4096)

    def add(self, name: str, delta: float = 1, *, changed: bool = False) -> None:
        """Add ``delta`` to counter ``name``; ``changed``: the cache holds something new."""
        with self._lock:
            self._values[name] += delta
            if changed:
                self._generation += 1

    def add_all(self, deltas: Mapping[str, float], *, changed: bool = False) -> None:
        """:meth:`add` of every counter in ``deltas`` at once (one lock)."""
        with self._lock:
            for name, delta in deltas.items():
                self._values[name] += delta
            if changed:
                self._generation += 1

    def changed(self) -> None:
        """The cache holds something new (or lost something): a save would write other bytes."""
        with self._lock:
            self._generation += 1

    @property
    def generation(self) -> int:
        with self._lock:
            return self._generation

    def values(self) -> dict[str, float]:
        with self._lock:
            return dict(self._values)

    def log_build(self, record: BuildRecord) -> None:
        with self._lock:
            self._builds.append(record)

    def build_log(self) -> list[BuildRecord]:
        """The most recent pipeline builds (up to 4096), oldest first."""
        with self._lock:
            return list(self._builds)
