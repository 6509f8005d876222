"""HostTransfers: how a plan's inputs reach its blobs and its outputs reach the host.

Where the device's memory is not the host's to write (a discrete GPU), inputs go through host
staging buffers and outputs through readback buffers, copied by the plan's command buffer.
With fp16 storage the staging and readback buffers hold float32 and the command buffer
converts on the GPU (``GpuModel.io_casts``): numpy converts float16 at about 1.7 ns an element
on the host, 30 times a copy, which made fp16 storage slower than fp32 on every model.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..cache._spec import PipelineSpec
from ..gpu._command import CommandRecorder
from ..gpu._device import VulkanDevice
from ..gpu._host_copies import copy_all
from ..gpu._info import GpuInfo
from ..gpu._memory import Buffer, MemoryKind
from ..gpu._pipeline import PipelineArtifact
from ..layers._gpu_api import groups_1d, local_size_1d, pack_push
from ..shader._options import ShaderOptions

_F32 = np.dtype(np.float32)

Shape = tuple[int, ...]


def cast_specs(info: GpuInfo, options: ShaderOptions) -> dict[str, PipelineSpec]:
    """The pipelines that convert float32 to the storage type and back, by direction."""
    local = local_size_1d(info)
    return {
        "to_storage": PipelineSpec("copy_f32", (), local, options),
        "to_f32": PipelineSpec("copy_to_f32", (), local, options),
    }


class HostTransfers:
    """The staging and readback buffers of a plan's items, and the host's side of them."""

    def __init__(
        self,
        device: VulkanDevice,
        batch: int,
        storage: np.dtype[Any],
        casts: dict[str, PipelineArtifact],
    ) -> None:
        self.device = device
        #: the blobs' type in device memory
        self.storage = storage
        #: the pipelines converting to and from float32 on the GPU (fp16 storage), else none
        self.casts = casts if storage != _F32 else {}
        #: what the host writes and reads: float32 when the GPU converts
        self.host = _F32 if self.casts else storage
        self.owned: list[Buffer] = []
        self.staging: list[dict[int, Buffer]] = [{} for _ in range(batch)]
        self.readback: list[dict[int, Buffer]] = [{} for _ in range(batch)]

    def staged(self, host_visible: bool) -> bool:
        """Whether inputs go through staging buffers (always, when the GPU converts them)."""
        return bool(self.casts) or not host_visible

    def read_back(self, host_visible: bool) -> bool:
        """Whether outputs go through readback buffers: where the device's memory is not
        cached for the host (a discrete GPU's BAR), or when the GPU converts them."""
        cached = host_visible and self.device.allocator.device_is_host_cached
        return bool(self.casts) or not cached

    def record_upload(self, rec: CommandRecorder, item: int, blob: int, view: Buffer) -> None:
        """Record ``blob``'s copy (or conversion) from a new staging buffer into ``view``."""
        count = view.size // self.storage.itemsize
        staging = self._own(count * self.host.itemsize, MemoryKind.STAGING)
        self.staging[item][blob] = staging
        self._move(rec, "to_storage", staging, view, count)

    def record_download(
        self, rec: CommandRecorder, item: int, blob: int, view: Buffer, shape: Shape
    ) -> None:
        """Record ``blob``'s copy (or conversion) from ``view`` into a new readback buffer."""
        count = math.prod(shape) if self.casts else view.size // self.storage.itemsize
        readback = self._own(count * self.host.itemsize, MemoryKind.READBACK)
        self.readback[item][blob] = readback
        self._move(rec, "to_f32", view, readback, count)

    def _own(self, nbytes: int, kind: MemoryKind) -> Buffer:
        buffer = self.device.allocate(max(nbytes, 4), kind)
        self.owned.append(buffer)
        return buffer

    def _move(self, rec: CommandRecorder, cast: str, src: Buffer, dst: Buffer, count: int) -> None:
        pipeline = self.casts.get(cast)
        if pipeline is None:
            rec.copy(src, dst)
            return
        info = self.device.info
        groups = groups_1d(count, local_size_1d(info), info)
        rec.dispatch(pipeline, [src, dst], pack_push("i", count), groups)

    def write_all(self, writes: list[tuple[int, int, np.ndarray, Buffer]]) -> None:
        """Each (item, input blob, array, view): the array into the item's staging buffer for
        the blob, or straight into ``view``. A batch's many items are copied on several threads
        (``gpu._host_copies``)."""
        pairs = []
        for item, blob, array, view in writes:
            data = np.ascontiguousarray(array, dtype=self.host).reshape(-1).view(np.uint8)
            staging = self.staging[item].get(blob)
            target = staging if staging is not None else view
            pairs.append((np.frombuffer(target.view(), np.uint8, data.nbytes), data))
        copy_all(pairs)

    def read(self, item: int, blob: int, view: Buffer, shape: Shape) -> np.ndarray:
        """Item ``item``'s ``blob`` as the host gets it (a view: float32 when the GPU
        converted it, else the storage type)."""
        readback = self.readback[item].get(blob)
        source, dtype = (readback, self.host) if readback is not None else (view, self.storage)
        n = math.prod(shape) * dtype.itemsize  # not np.prod: 5 us a call, every run
        return np.frombuffer(source.view()[:n], dtype=dtype).reshape(shape)

    def release(self) -> None:
        for buffer in self.owned:
            buffer.release()
        self.owned.clear()
