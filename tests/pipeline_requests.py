"""One pipeline through the cache's one request API (``request_many``/``get_many``).

Tests that ask for a single pipeline read better with these than with a one-element batch.
"""

from __future__ import annotations

from concurrent.futures import Future

from asyncvk.cache import PipelineCache, PipelineSpec
from asyncvk.gpu import PipelineArtifact


def request_one(cache: PipelineCache, spec: PipelineSpec) -> Future[PipelineArtifact]:
    """The shared build of ``spec`` (started, or joined when already running)."""
    return cache.request_many([spec])[spec]


def build_one(cache: PipelineCache, spec: PipelineSpec) -> PipelineArtifact:
    """The pipeline of ``spec``, waiting on this thread."""
    return request_one(cache, spec).result()


async def get_one(cache: PipelineCache, spec: PipelineSpec) -> PipelineArtifact:
    """The pipeline of ``spec``; cancelling this waiter never cancels the shared build."""
    return (await cache.get_many([spec]))[spec]
