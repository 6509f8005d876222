"""Whether to set the GLSL compiler up before any load asks for it.

glslang's one-time set-up is a compile's worth of C (80-130 ms) on a thread of its own. A
load with no local cache starts it early, beside the imports and the device's opening, so
that its first compile does not wait. With a remote cache that answers, the store most likely
holds every entry: there the set-up cost a warm start 5-10% on the H100 and more on lavapipe's
2 cores, for nothing. So with a remote cache the store is probed first (a plain connection,
made and dropped on the set-up's own thread) and the set-up starts only when it does not
answer: the load will compile. A store that answers but lacks the model (the fleet's first
machine) leaves the set-up to the first compile, as does a local cache that is not empty.
"""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlsplit

from ._remote_url import configured_remote_url


def store_answers(url: str, timeout: float) -> bool:
    """Whether the server a remote cache URL names accepts a connection within ``timeout``."""
    parts = urlsplit(url)
    try:
        if parts.scheme == "unix":
            with socket.socket(socket.AF_UNIX) as s:
                s.settimeout(timeout)
                s.connect(parts.path)
            return True
        with socket.create_connection((parts.hostname or "", parts.port or 6379), timeout):
            return True
    except (OSError, ValueError):
        return False


#: URL -> whether its store answered: the CLI's first lines and a Net's load_param both ask,
#: and one connection answers both
_answered: dict[str, bool] = {}
_probe_lock = threading.Lock()


def local_cache_empty(cache_file: str | None, cache_dir: str | None) -> bool:
    """Whether a run starts with nothing local: no cache file, or an empty or absent folder (a
    folder that holds anything most likely holds this model)."""
    if cache_file is not None:
        return not os.path.exists(cache_file)
    folder = None if cache_dir is None else os.path.expanduser(cache_dir)
    try:
        if folder is not None and os.path.isdir(folder):
            with os.scandir(folder) as entries:
                return not any(entries)
    except OSError:  # unreadable: the load cannot use it either (the folder code says why)
        pass
    return True


def set_up_early(
    remote_cache: str | None, cache_file: str | None = None, cache_dir: str | None = None
) -> bool:
    """True without a remote cache (``remote_cache``, or the environment's). With one: False
    when the local cache (``cache_file``, else ``cache_dir``) is not empty, since it or the
    store most likely holds everything, or when the store answers (asked once per process);
    True when it does not. May block for the connect timeout: call it on a thread."""
    url, where = configured_remote_url(remote_cache)
    if not url:
        return True
    if not local_cache_empty(cache_file, cache_dir):
        return False
    with _probe_lock:
        if url not in _answered:
            from ._remote_store import parse_remote_url

            try:
                settings = parse_remote_url(url, where=where)
            except ValueError:
                return True  # the load reports the URL, and compiles
            _answered[url] = store_answers(settings.url, settings.connect_timeout)
        return not _answered[url]


def prepare_compiler_unless_served(remote_cache: str | None, cache_dir: str | None) -> None:
    """Start glslang's set-up now, or with a remote cache, on a thread once
    :func:`set_up_early` says so."""
    if not configured_remote_url(remote_cache)[0]:
        from ..shader._compiler import prepare_compiler

        prepare_compiler()
        return

    def probe_then_prepare() -> None:
        if set_up_early(remote_cache, cache_dir=cache_dir):
            # its binding takes 5 ms to load on the H100: only for a set-up
            from ..shader._compiler import prepare_compiler

            prepare_compiler()

    threading.Thread(target=probe_then_prepare, name="asyncvk-probe-store", daemon=True).start()
