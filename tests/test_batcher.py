"""The dynamic batcher: concurrent requests join one batch (one extraction, one submission),
each answer equal to a run of its own; order, bounds, and callers that went away."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from test_net_run import OUTPUTS, _image, _net

from asyncvk import InputError, Net
from asyncvk.serve._batcher import Batcher, BatchSettings, QueueFull, padded_size


@pytest.fixture
async def net(tmp_path: Path) -> AsyncIterator[Net]:
    async with await _net(tmp_path) as net:
        yield net


async def _alone(net: Net, x: np.ndarray) -> dict[str, np.ndarray]:
    return await net.run({"data": x})


async def test_requests_that_arrive_together_run_as_one_batch(net: Net) -> None:
    batcher = Batcher(net, BatchSettings(max_batch=8, max_inflight=1))
    xs = [_image(i, 1) for i in range(11)]
    assert net.device is not None
    before = net.device.submissions
    answers = await asyncio.gather(*(batcher.infer({"data": x}) for x in xs))
    stats = batcher.statistics
    # all eleven queued in one turn of the loop: the first alone (its plan tells the batcher
    # what an item takes in memory), then 8, then 2
    assert stats.batch_sizes == {1: 1, 8: 1, 2: 1}, stats.batch_sizes
    assert net.device.submissions - before == 3  # one submission a batch
    assert (stats.requests, stats.succeeded, stats.items) == (11, 11, 11)
    for x, answer in zip(xs, answers, strict=True):
        expected = await _alone(net, x)
        assert list(answer) == OUTPUTS
        for name in OUTPUTS:
            assert answer[name].shape == expected[name].shape
            np.testing.assert_allclose(answer[name], expected[name], rtol=1e-5, atol=1e-6)


async def test_a_queue_delay_lets_requests_join_the_head(net: Net) -> None:
    batcher = Batcher(net, BatchSettings(max_batch=8, max_queue_delay=0.05))
    await batcher.infer({"data": _image(0, 1)})  # a shape's first request runs alone
    await asyncio.gather(*(batcher.infer({"data": _image(i, 1)}) for i in range(3)))
    assert batcher.statistics.batch_sizes == {1: 1, 3: 1}
    full = Batcher(net, BatchSettings(max_batch=4, max_queue_delay=3600.0))
    await full.infer({"data": _image(0, 1)})
    await asyncio.gather(*(full.infer({"data": _image(i, 1)}) for i in range(4)))
    assert full.statistics.batch_sizes == {1: 1, 4: 1}  # full before the delay: no wait


async def test_requests_of_several_items_and_other_shapes(net: Net) -> None:
    batcher = Batcher(net, BatchSettings(max_batch=8, max_inflight=1))
    two, three = _image(1, 2), _image(2, 3)
    wide = np.random.default_rng(3).uniform(-1, 1, (1, 3, 10, 16)).astype(np.float32)
    for x, outputs in ((_image(0, 1), None), (_image(0, 1), ["logits", "boxes"]), (wide, None)):
        await batcher.infer({"data": x}, outputs=outputs)  # each key's first runs alone
    batcher.statistics.batch_sizes.clear()
    _, a, other, b = await asyncio.gather(
        batcher.infer({"data": _image(0, 1)}),
        batcher.infer({"data": two}),
        batcher.infer({"data": wide}),
        batcher.infer({"data": three}, outputs=["logits", "boxes"]),
    )
    assert a["boxes"].shape[0] == 2 and list(b) == ["logits", "boxes"] and b["logits"].shape[0] == 3
    assert other["boxes"].shape[0] == 1
    for x, answer in ((two, a), (three, b), (wide, other)):
        expected = await _alone(net, x)
        for name in answer:
            np.testing.assert_allclose(answer[name], expected[name], rtol=1e-5, atol=1e-6)
    # 1 + 2 items of one shape join; another shape (wide) or other outputs go on their own
    assert batcher.statistics.batch_sizes == {3: 2, 1: 1}


async def test_a_full_queue_refuses_and_a_gone_caller_is_dropped(net: Net) -> None:
    batcher = Batcher(net, BatchSettings(max_queue=3))
    tasks = [asyncio.ensure_future(batcher.infer({"data": _image(i, 1)})) for i in range(4)]
    await asyncio.sleep(0)  # every task has queued its request (or been refused)
    tasks[1].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[3], QueueFull) and isinstance(done[1], asyncio.CancelledError)
    stats = batcher.statistics
    assert (stats.refused, stats.dropped, stats.succeeded, stats.items) == (1, 1, 2, 2)


async def test_a_failed_batch_fails_its_requests_only(net: Net) -> None:
    batcher = Batcher(net)
    bad = np.zeros((1, 3, 1, 1), np.float32)  # too small for a 3x3 convolution... with pad 1
    small = await batcher.infer({"data": bad})  # pad 1: a 1x1 image is fine
    assert small["boxes"].shape[0] == 1
    with pytest.raises(InputError, match="same number of items"):
        await batcher.infer({"data": _image(0, 2), "other": _image(0, 3)})
    with pytest.raises(InputError, match="no blob named 'nope'"):
        await batcher.infer({"data": _image(0, 1)}, outputs=["nope"])
    assert (await batcher.infer({"data": _image(0, 1)}))["boxes"].shape[0] == 1


async def test_a_batch_holds_the_items_whose_memory_fits(net: Net) -> None:
    """With room for two and a half items' blobs, batches hold at most two (the power of two
    that fits, so that the padded batch fits too), and the answers are still each request's."""
    ex = net.create_extractor()
    ex.input("data", _image(0, 1), batch_axis=True)
    await ex.extract_many(OUTPUTS)
    item_bytes = ex.plan_item_bytes
    assert item_bytes is not None and item_bytes > 0
    settings = BatchSettings(max_batch=8, max_inflight=1, max_batch_bytes=item_bytes * 5 // 2)
    batcher = Batcher(net, settings)
    xs = [_image(i, 1) for i in range(7)]
    answers = await asyncio.gather(*(batcher.infer({"data": x}) for x in xs))
    # the first alone (its plan tells what an item takes), then at most two
    assert batcher.statistics.batch_sizes == {1: 1, 2: 3}, batcher.statistics.batch_sizes
    for x, answer in zip(xs, answers, strict=True):
        np.testing.assert_allclose(
            answer["logits"], (await _alone(net, x))["logits"], rtol=1e-5, atol=1e-6
        )
    big = Batcher(net, BatchSettings(max_batch=8, max_batch_bytes=item_bytes))
    await asyncio.gather(*(big.infer({"data": x}) for x in xs[:3]))
    assert big.statistics.batch_sizes == {1: 3}  # room for one item: one at a time
    three = await big.infer({"data": _image(9, 3)})  # a single request over it runs alone
    assert three["logits"].shape[0] == 3 and big.statistics.batch_sizes[3] == 1


def test_batch_sizes_round_up_to_powers_of_two() -> None:
    assert [padded_size(n, 32) for n in (1, 2, 3, 5, 8, 9, 31, 32, 40)] == [
        1, 2, 4, 8, 8, 16, 32, 32, 40,
    ]  # fmt: skip
    assert padded_size(5, 6) == 6
    with pytest.raises(ValueError, match="max_batch must be at least 1"):
        BatchSettings(max_batch=0)
