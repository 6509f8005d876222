"""Which remote cache a process names, if any: the one check every load makes, kept apart from
``_remote_store`` (its import, 1-1.5 ms on lavapipe's machine, is for runs that have one)."""

from __future__ import annotations

import os

#: Where a process that names no remote cache finds one.
URL_VARIABLE = "ASYNCVK_REMOTE_CACHE"


def configured_remote_url(url: str | None) -> tuple[str, str]:
    """The remote cache URL to use ("": none) and who gave it, for error messages: ``url``
    itself, or ``ASYNCVK_REMOTE_CACHE`` when ``url`` is None."""
    if url is None:
        return os.environ.get(URL_VARIABLE) or "", URL_VARIABLE
    return url, "remote cache"
