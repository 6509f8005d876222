"""What every part of the remote tier shares: its settings, its connection, its fail-open switch.

:class:`TierLink` holds one tier's signing key and namespace, opens the store on first need
(on the running event loop, once for tasks that open at once), turns the tier off at its first
error, says why a value was not used, and keeps what a load found in the store for the push
after it. The reads (:mod:`._remote_tier_reads`) and the push (:mod:`._remote_tier_push`) each
hold the one link of their tier; :mod:`._remote_tier` puts them together.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from ..gpu._driver_cache import DriverPipelineCache
from ._keys import SpirvKey
from ._remote_connect import connect_store
from ._remote_state import remote_state
from ._remote_store import BadValue, RemoteSettings, RemoteStore
from ._remote_values import key_space, spirv_value_key

log = logging.getLogger("asyncvk.cache.remote")

KEY_VARIABLE = "ASYNCVK_REMOTE_CACHE_KEY"
#: Said once per URL and process by a tier without a signing key.
UNSIGNED_NOTICE = (
    "no signing key: driver blobs, and SPIR-V other than a builtin shader's as the install "
    "compiled it, are neither read from the store nor written to it (nothing could verify "
    f"them); set {KEY_VARIABLE} (or Option(remote_cache_key=...)) to the same secret on every "
    "machine to share them"
)


def resolve_secret(secret: str | bytes | None) -> bytes | None:
    """The signing key: the one given, else ``ASYNCVK_REMOTE_CACHE_KEY``; None when neither."""
    if secret is None:
        secret = os.environ.get(KEY_VARIABLE) or None
    if isinstance(secret, str):
        secret = secret.encode()
    return secret or None


class TierLink:
    """What the reads and the push of one tier share: its settings and key, its store
    connection (opened on first need, on the running event loop), and what this load found
    there. The switch and counters are the process's (:func:`remote_state`)."""

    def __init__(self, settings: RemoteSettings, secret: bytes | None = None) -> None:
        self.settings = settings
        self.secret = secret
        #: the namespace of this key's values (``unsigned`` without one)
        self.space = key_space(secret)
        self.state = remote_state(settings.display)
        self.store: RemoteStore | None = None
        #: made on the running loop at the first open: two tasks opening at once share a store
        self._open_lock: asyncio.Lock | None = None
        #: SPIR-V keys the loaded models need, and those the store is known to hold
        self.wanted: set[SpirvKey] = set()
        self.remote_has: set[SpirvKey] = set()
        #: of those, the keys the local cache already held at load: not pushed after load
        self.local_had: set[SpirvKey] = set()
        #: blob keys read from the identity's set (None: not read yet)
        self.members: list[str] | None = None
        #: blob key -> the driver cache it was merged into (a reset replaces that cache)
        self.merged: dict[str, DriverPipelineCache] = {}
        #: store key -> the value read there that failed a check, for the push to replace
        self.bad: dict[str, BadValue] = {}
        #: store keys read as holding nothing: absent, or an empty value the push replaces
        self.empty: set[str] = set()

    @property
    def on(self) -> bool:
        return self.state.off_reason is None

    def report(self) -> dict[str, Any]:
        return {**self.state.report(), "signed": self.secret is not None}

    async def open(self) -> RemoteStore:
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:  # a second opener waits, or it would leak a connection
            if self.store is None:
                self.store = await connect_store(self.settings)
            return self.store

    def turn_off(self, reason: str) -> None:
        state = self.state
        if state.off_reason is None:  # one error per URL and process: the tier is off after it
            state.add(errors=1)
            state.off_reason = reason
            log.warning(
                "remote pipeline cache turned off for this process, loading goes on without it: %s",
                reason,
            )

    def reject(self, what: str, reason: str) -> None:
        self.state.add(misses=1, rejected=1)
        self.state.rejections.append(f"{what}: {reason}")
        log.warning("remote pipeline cache: %s not used: %s", what, reason)

    def note_unsigned(self) -> None:
        if self.state.note(UNSIGNED_NOTICE):
            log.warning("remote pipeline cache %s: %s", self.settings.display, UNSIGNED_NOTICE)

    def name(self, key: SpirvKey) -> str:
        return spirv_value_key(key, self.space)

    async def aclose(self) -> None:
        store, self.store = self.store, None
        if store is not None:
            await store.aclose()
