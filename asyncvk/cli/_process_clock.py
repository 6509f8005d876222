"""The user's clock: seconds since the kernel started this process, not since an import.

A user times a command from the moment it starts, so interpreter start-up and imports count.
Linux records each process's start in ``/proc/self/stat`` (field 22, ``starttime``, in clock
ticks since boot, usually 10 ms each); :func:`since_process_start` compares it with
``CLOCK_BOOTTIME``, the clock it is counted on. The tick truncates, so the figure reads 0 to
one tick long. Elsewhere it returns None. Standard library only: it is imported first.
"""

from __future__ import annotations

import os
import time


def _start_since_boot() -> float | None:
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    # field 2 (the command name) may hold spaces and ')': the fields after it follow its last ')'
    fields = stat[stat.rindex(b")") + 2 :].split()
    return int(fields[19]) / ticks  # field 22 counted from 1, so 20th after field 2


_START = _start_since_boot() if hasattr(time, "CLOCK_BOOTTIME") else None


def since_process_start() -> float | None:
    """Seconds from the kernel's start of this process to now (None where not known)."""
    if _START is None:
        return None
    return time.clock_gettime(time.CLOCK_BOOTTIME) - _START


__all__ = ("since_process_start",)
