"""The remote tier's counters and on/off switch: one per URL, shared by every Net of the
process, read by ``/metrics`` and ``--json`` (stdlib only: reading them imports no client)."""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class RemoteCounters:
    """What a process did with one remote cache (every Net using that URL together)."""

    #: values used: SPIR-V entries and driver blobs
    hits: int = 0
    #: values looked for and not used: absent, or rejected by a check
    misses: int = 0
    #: of the misses, values that were there and failed a check
    rejected: int = 0
    #: store failures (each turns the tier off, so at most one per URL and process)
    errors: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    #: values written
    pushed: int = 0
    #: of those, written over a value this process had refused (damaged, forged, emptied)
    replaced: int = 0
    #: refused values deleted by a process that had no value of its own to write there
    deleted: int = 0
    #: values not written because they are larger than ``max_value``
    too_large: int = 0


@dataclass
class RemoteState:
    """One URL's counters and on/off switch, shared by every tier of the process."""

    display: str
    counters: RemoteCounters = field(default_factory=RemoteCounters)
    off_reason: str | None = None
    #: the last rejections, with their reasons (newest last)
    rejections: deque[str] = field(default_factory=lambda: deque(maxlen=16))
    #: what the tier does not do with this store, and the fix (said once per process)
    notice: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def note(self, text: str) -> bool:
        """Keep ``text`` as the notice; whether it is new (to be logged once)."""
        with self._lock:
            if self.notice == text:
                return False
            self.notice = text
            return True

    def add(self, **deltas: int) -> None:
        with self._lock:
            for name, delta in deltas.items():
                setattr(self.counters, name, getattr(self.counters, name) + delta)

    def report(self) -> dict[str, Any]:
        with self._lock:
            out: dict[str, Any] = {"url": self.display, "on": self.off_reason is None}
            out.update(asdict(self.counters))
        if self.off_reason is not None:
            out["off_reason"] = self.off_reason
        if self.notice is not None:
            out["notice"] = self.notice
        if self.rejections:
            out["rejections"] = list(self.rejections)
        return out


_STATES: dict[str, RemoteState] = {}
_STATES_LOCK = threading.Lock()


def remote_state(display: str) -> RemoteState:
    with _STATES_LOCK:
        return _STATES.setdefault(display, RemoteState(display))


def remote_states() -> list[RemoteState]:
    """Every remote cache this process has used (for ``/metrics``)."""
    with _STATES_LOCK:
        return list(_STATES.values())


#: The counters in /metrics: report field -> metric name (``asyncvk_remote_cache_<name>``).
METRIC_NAMES = {
    "hits": "hits_total",
    "misses": "misses_total",
    "rejected": "rejected_total",
    "errors": "errors_total",
    "bytes_read": "read_bytes_total",
    "bytes_written": "written_bytes_total",
    "pushed": "pushed_total",
    "replaced": "replaced_total",
    "deleted": "deleted_total",
    "too_large": "too_large_total",
}


def metric_lines(status: dict[str, Any] | None) -> list[str]:
    """``asyncvk_remote_cache_*`` for ``/metrics``: the counters of a tier's report, and 1
    while it is on; nothing without a remote cache."""
    if status is None:
        return []
    lines = []
    for field_name, name in METRIC_NAMES.items():
        lines.append(f"# TYPE asyncvk_remote_cache_{name} counter")
        lines.append(f"asyncvk_remote_cache_{name} {status[field_name]}")
    lines.append("# TYPE asyncvk_remote_cache_up gauge")
    lines.append(f"asyncvk_remote_cache_up {int(status['on'])}")
    return lines
