"""Warming a served model up before it is ready: one inference on zeros (the first run of a
shape pays for its plan and, on lavapipe, for compiling its shaders), the background pipelines
adopted, and optionally the plan of every batch size the batcher makes."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .._errors import AsyncVkError
from ..net._input_limits import check_input_size
from ..net._net import Net
from ._batcher import Batcher


async def warm_up(
    net: Net, shapes: Mapping[str, tuple[int, ...]], batcher: Batcher | None = None
) -> None:
    """One inference on zeros (through ``batcher``, which learns what an item of these shapes
    takes in memory); then the pipelines built in the background (the Winograd passes on
    lavapipe, which waits for a first inference to compile them) are adopted and, if any were,
    a second inference records the plan again with them: ready means none is left."""
    before = net.gpu_model.pipelines_version if net.gpu_model is not None else 0
    await _infer_zeros(net, shapes, batcher)
    await net.background_builds()
    if net.gpu_model is not None and net.gpu_model.pipelines_version != before:
        await _infer_zeros(net, shapes, batcher)


async def warm_up_batches(
    net: Net, shapes: Mapping[str, tuple[int, ...]], batcher: Batcher
) -> None:
    """The plan of every batch size the batcher makes (powers of two up to ``max_batch``, and
    whose items fit ``max_batch_bytes``), recorded now: a burst's first batches then pay no
    recording (for a 950-layer model, a batch of 16 took 1.5 s to record on an H200, in the
    first burst's tail). The batch of one is the warm-up's own, which told the batcher what an
    item takes."""
    settings = batcher.settings
    item_bytes = batcher.item_bytes(shapes)
    if item_bytes is None:
        raise RuntimeError("warm_up_batches needs the warm-up's batch of one to have run")
    size = 2
    while size <= settings.max_batch and size * item_bytes <= settings.max_batch_bytes:
        ex = net.create_extractor()
        for name, shape in shapes.items():
            ex.input(name, np.zeros((size, *shape), np.float32), batch_axis=True)
        await ex.extract_many(net.output_names)
        size *= 2


async def _infer_zeros(
    net: Net, shapes: Mapping[str, tuple[int, ...]], batcher: Batcher | None
) -> None:
    ex = net.create_extractor()
    for name, shape in shapes.items():
        check_input_size(f"warm-up input {name}", shape)
        try:
            ex.input(name, np.zeros(shape, np.float32))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"warm-up input {name}={shape}: {exc}") from exc
    try:
        if batcher is None:
            await ex.extract_many(net.output_names)
        else:
            await batcher.infer({n: np.zeros((1, *s), np.float32) for n, s in shapes.items()})
    except AsyncVkError as exc:
        raise ValueError(f"warm-up with {dict(shapes)}: {exc}") from exc
