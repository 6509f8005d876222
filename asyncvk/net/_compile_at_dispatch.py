"""Where a CPU device's driver compiles a pipeline: at its first dispatch (llvmpipe does), so a
load's background pipelines are dispatched once, empty, before plans adopt them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from ..gpu._command import CommandRecorder
from ..gpu._device import VulkanDevice
from ..gpu._memory import Buffer
from ..gpu._pipeline import PipelineArtifact


async def compile_at_dispatch(device: VulkanDevice, artifacts: Iterable[PipelineArtifact]) -> None:
    """One empty dispatch of each pipeline (zero push constants: every shader's sizes are
    then 0), which is where llvmpipe compiles it. Shielded: a release meanwhile cancels
    the wait, not the commands, which free their buffers once the device is done."""
    scratch = device.allocate(256)
    recorder = CommandRecorder(device, one_time=True)
    try:
        for i, artifact in enumerate(artifacts):
            if i:  # they touch nothing at size 0, but all bind one buffer
                recorder.barrier()
            bindings = [scratch] * artifact.binding_count
            recorder.dispatch(artifact, bindings, bytes(artifact.push_constant_size), (1, 1, 1))
        recorder.finish()
    except BaseException:
        recorder.release()
        scratch.release()
        raise
    await asyncio.shield(asyncio.ensure_future(_run_then_free(device, recorder, scratch)))


async def _run_then_free(device: VulkanDevice, recorder: CommandRecorder, scratch: Buffer) -> None:
    try:
        await device.run(recorder)
    finally:
        recorder.release()
        scratch.release()
