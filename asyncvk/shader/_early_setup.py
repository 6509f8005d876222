"""Whether to set the GLSL compiler up before any load asks for it.

glslang's one-time set-up is a compile's worth of C (about 0.1 s on lavapipe's machine, GIL
released) on a core of its own. A load with no local cache starts it early, beside the imports
and the device's opening, so that its first compile does not wait. With a remote cache the
store most likely holds every entry, and where the process has two cores or fewer the set-up
takes one of them from the imports and the driver: there it is left to the first compile, if
any (lavapipe, 2 cores: a warm start from Redis was 50-70 ms slower with it).
"""

from __future__ import annotations

import os

from ..cache._remote_url import configured_remote_url

#: The fewest usable cores at which a speculative set-up has one to itself.
SPARE_CORES = 3


def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def set_up_early(remote_cache: str | None) -> bool:
    """False when a remote cache is configured (``remote_cache``, or the environment's) and
    the process has fewer than :data:`SPARE_CORES` cores; True otherwise."""
    url, _ = configured_remote_url(remote_cache)
    return not url or _usable_cores() >= SPARE_CORES
