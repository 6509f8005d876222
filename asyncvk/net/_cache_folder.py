"""ModelCacheFolder: one Net's use of the managed cache folder (``Option.cache_dir`` +
``graph_key``).

At load, this device's file for the key is loaded into the PipelineCache, unless the model's
fingerprint changed since it was written; after load, and whenever the cache builds something
new, the cache is merged with what the folder holds and saved (the Net's AutoSaver calls
:meth:`ModelCacheFolder.save`, off the request path).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._threads import run_sync
from ..cache._persist import SaveResult
from ..cache._pipeline_cache import PipelineCache
from ._model_source import ModelSource

if TYPE_CHECKING:
    from ..cache._directory import CacheDirectory

#: A model file as ``load_param``/``load_model`` keep it: a path, or its bytes.


class ModelCacheFolder:
    """The folder, the key and the model's fingerprint; ``status`` says what the load did."""

    def __init__(
        self, directory: CacheDirectory, graph_key: str, sources: tuple[ModelSource, ModelSource]
    ) -> None:
        self.directory = directory
        self.graph_key = graph_key
        #: the param and weights, until the fingerprint is computed from them
        self._sources: tuple[ModelSource, ModelSource] | None = sources
        self._fingerprint: str | None = None
        self._fingerprint_lock = threading.Lock()
        #: {"loaded": bool, "reason": str, "stale_removed": int, and "file",
        #: "entries_used" when a file was loaded, "saved" once one is written}
        self.status: dict[str, Any] = {}

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        graph_key: str,
        cache: PipelineCache,
        param_source: ModelSource,
        model_source: ModelSource,
    ) -> ModelCacheFolder:
        """Look this device's file up and load it into ``cache``; ``status`` tells how it went."""
        # the folder's module costs about 15 ms to import: only Nets with a cache folder pay it
        from ..cache._directory import CacheDirectory

        directory = CacheDirectory(path, read_only=cache.read_only)
        folder = cls(directory, graph_key, (param_source, model_source))
        identity = cache.device.info.identity
        found = await run_sync(directory.lookup, graph_key, identity, folder.fingerprint)
        folder.status = {
            "loaded": False,
            "reason": found.reason,
            "stale_removed": found.stale_removed,
        }
        if found.data is not None:
            result = await run_sync(cache.load_cache, found.data)
            folder.status.update(
                loaded=bool(result),
                reason=result.reason,
                file=str(found.path),
                entries_used=result.entries_used,
            )
        return folder

    def fingerprint(self) -> str:
        """The model's fingerprint (a hash of the param and every weight: 5-9 ms for a 7 MB
        model on lavapipe's machine), computed at first need on the calling thread: by the
        lookup only when this device has a file to check it against, else by the first save,
        after the load. A load from an empty folder (warm from a remote cache) never waits."""
        with self._fingerprint_lock:
            if self._fingerprint is None:
                from ..cache._directory import model_fingerprint

                assert self._sources is not None
                self._fingerprint, self._sources = model_fingerprint(*self._sources), None
            return self._fingerprint

    @property
    def writable(self) -> bool:
        """False for a read-only folder or cache: it served the load, nothing is saved."""
        return bool(self.directory.writable)

    async def save(self, cache: PipelineCache) -> SaveResult:
        """Merge ``cache`` with this key's file (keeping what another process saved), write it."""

        def build(current: bytes | None) -> bytes:
            return cache.merged_with(current)

        path: Path | None = await run_sync(
            self.directory.store,
            self.graph_key,
            cache.device.info.identity,
            self.fingerprint,
            build,
        )
        if path is None:
            return SaveResult(False, f"not saved to {self.directory.path}")
        self.status["saved"] = str(path)
        return SaveResult(True, "saved", str(path))
