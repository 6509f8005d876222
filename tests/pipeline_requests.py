"""One pipeline through the cache's one request API (``request_many``/``get_many``), and one
run of a ``scale_add`` pipeline to check what it computes.

Tests that ask for a single pipeline read better with these than with a one-element batch.
"""

from __future__ import annotations

import struct
from concurrent.futures import Future

import numpy as np

from asyncvk.cache import PipelineCache, PipelineSpec
from asyncvk.gpu import CommandRecorder, PipelineArtifact, VulkanDevice


def request_one(cache: PipelineCache, spec: PipelineSpec) -> Future[PipelineArtifact]:
    """The shared build of ``spec`` (started, or joined when already running)."""
    return cache.request_many([spec])[spec]


def build_one(cache: PipelineCache, spec: PipelineSpec) -> PipelineArtifact:
    """The pipeline of ``spec``, waiting on this thread."""
    return request_one(cache, spec).result()


async def get_one(cache: PipelineCache, spec: PipelineSpec) -> PipelineArtifact:
    """The pipeline of ``spec``; cancelling this waiter never cancels the shared build."""
    return (await cache.get_many([spec]))[spec]


def run_scale_add(
    device: VulkanDevice, pipeline: PipelineArtifact, x: np.ndarray, bias: float
) -> np.ndarray:
    """``x * alpha + bias + offset`` through a ``scale_add`` pipeline (its constants give alpha
    and offset), one invocation per element."""
    src = device.upload_sync(x)
    dst = device.allocate(x.nbytes)
    rec = CommandRecorder(device, one_time=True)
    try:
        groups = -(-x.size // pipeline.local_size[0])
        rec.dispatch(pipeline, [src, dst], struct.pack("<if", x.size, bias), (groups, 1, 1))
        device.run_sync(rec.finish())
        return device.download_sync(dst, x.shape)
    finally:
        rec.release()
        src.release()
        dst.release()
