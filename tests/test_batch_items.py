"""A batch's inputs reach the plan as its requests' own arrays (``net._item_batch``): each item
copied once into the plan, no joined batch array, padding items neither written nor read, and
every answer equal to a run of its own."""

from __future__ import annotations

import asyncio
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from test_net_run import OUTPUTS, PARAM, _image, _net

from asyncvk import InputError, Net, Option, PipelineCache
from asyncvk.gpu import VulkanDevice
from asyncvk.net._item_batch import ItemBatch
from asyncvk.net._random_weights import random_weights
from asyncvk.serve._batcher import Batcher, BatchSettings
from asyncvk.serve._grouped_batch import BatchItem, run_grouped

#: requests of 1, 2, 3 and 1 items: a batch of 7, padded to 8 (then 1 and 2: 3, padded to 4)
SIZES = (1, 2, 3, 1)


async def _batched(batcher: Batcher, xs: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Every request at once, so that they join one batch."""
    return await asyncio.gather(*(batcher.infer({"data": x}) for x in xs))


def _requests(seed: int, sizes: tuple[int, ...], side: int = 0) -> list[np.ndarray]:
    if not side:
        return [_image(seed + i, n) for i, n in enumerate(sizes)]
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, (n, 3, side, side)).astype(np.float32) for n in sizes]


async def _cpu_tail_net(tmp_path: Path) -> Net:
    """The model of ``test_net_run`` with its last layer (an output) on the CPU: a target the
    plan stacks from the host's items rather than reads back."""
    param = tmp_path / "tail.param"
    param.write_text(PARAM.format(mask=0).replace("2=40", "2=40 31=16"))
    net = Net(Option())
    await net.load_param(param)
    await net.load_model(random_weights(param, seed=3))
    return net


@pytest.mark.parametrize("where", ["gpu", "cpu-layer-inside", "cpu-layer-output", "cpu"])
async def test_answers_through_the_batcher_equal_runs_alone(tmp_path: Path, where: str) -> None:
    if where == "cpu-layer-output":
        net = await _cpu_tail_net(tmp_path)
    else:
        net = await _net(
            tmp_path, gpu=where != "cpu", mask=16 if where == "cpu-layer-inside" else 0
        )
    async with net:
        batcher = Batcher(net, BatchSettings(max_batch=8, max_inflight=1))
        xs = _requests(10, SIZES)
        await batcher.infer({"data": xs[0]})  # a shape's first request runs alone
        answers = await _batched(batcher, xs) + await _batched(batcher, _requests(20, (1, 2)))
        assert batcher.statistics.batch_sizes == {1: 1, 7: 1, 3: 1}
        for x, answer in zip(xs + _requests(20, (1, 2)), answers, strict=True):
            assert list(answer) == OUTPUTS
            for i, item in enumerate(x):
                alone = await net.run({"data": item})
                for name in OUTPUTS:
                    assert answer[name].shape == (len(x), *alone[name].shape)
                    np.testing.assert_allclose(answer[name][i], alone[name], rtol=1e-6, atol=1e-6)
        # an extraction over the same batch keeps its 8 rows (the padding's unset), and hands
        # its input back joined
        ex = net.create_extractor()
        ex.input("data", ItemBatch(xs, 8))
        outputs = await ex.extract_many([*OUTPUTS, "data"])
        assert {len(a) for a in outputs.values()} == {8}
        np.testing.assert_array_equal(outputs["data"], np.concatenate([*xs, np.zeros_like(xs[0])]))
        for name in OUTPUTS:
            batched = np.concatenate([a[name] for a in answers[: len(xs)]])
            np.testing.assert_array_equal(outputs[name][:7], batched)


async def test_the_plan_gets_each_request_item_and_no_padding(
    staged: VulkanDevice, tmp_path: Path
) -> None:
    """Each item's staging buffer holds that request's item, byte for byte; the padding
    item's is never written (a sentinel put there stays), and the answers are still right."""
    param = tmp_path / "three.param"
    param.write_text(PARAM.format(mask=0))
    # one plan per shape, kept while idle: the second batch runs on the first one's plan
    with PipelineCache(staged) as cache:
        option = Option(pipeline_cache=cache, max_plans_per_shape=1, idle_batch_plans=1)
        async with Net(option) as net:
            await net.load_param(param)
            await net.load_model(random_weights(param, seed=3))
            batcher = Batcher(net, BatchSettings(max_batch=8, max_inflight=1))
            await batcher.infer({"data": _image(0, 1)})
            await _batched(batcher, _requests(30, SIZES))
            assert net.gpu_model is not None
            (plan,) = [p for r, ps in net.gpu_model.plans.plans.items() if r.batch == 8 for p in ps]
            data = net.graph.blob_index["data"]
            staging = [plan.io.staging[item][data] for item in range(8)]
            sentinel = np.full(staging[7].size // 4, 1234.5, np.float32)
            staging[7].view()[:] = sentinel.view(np.uint8).data
            xs = _requests(40, SIZES)
            answers = await _batched(batcher, xs)
            items = [item for x in xs for item in x]
            for item, (buffer, x) in enumerate(zip(staging, items, strict=False)):
                written = np.frombuffer(buffer.view(), np.float32)[: x.size]
                np.testing.assert_array_equal(written, x.ravel(), err_msg=f"item {item}")
            np.testing.assert_array_equal(np.frombuffer(staging[7].view(), np.float32), sentinel)
            for x, answer in zip(xs, answers, strict=True):
                alone = await net.run({"data": x})
                for name in OUTPUTS:
                    np.testing.assert_allclose(answer[name], alone[name], rtol=1e-6, atol=1e-6)


#: an image in, four numbers out: a batch's host memory is its inputs, nothing else large
POOLED = """7767517
3 3
Input            data     0 1 data
Convolution      conv0    1 1 data c0 0=4 1=3 4=1 5=1 6=108 9=1
Pooling          pool0    1 1 c0 out 0=1 4=1
"""


async def test_a_batch_allocates_no_joined_array(tmp_path: Path) -> None:
    """The host side of a batch of 96x96 images (5 items, padded to 8: 884 KB joined) takes
    a small part of that in Python and numpy memory: nothing joins them."""
    param = tmp_path / "pooled.param"
    param.write_text(POOLED)
    async with Net(Option()) as net:
        await net.load_param(param)
        await net.load_model(random_weights(param, seed=5))
        batcher = Batcher(net, BatchSettings(max_batch=8, max_inflight=1))
        xs = _requests(50, (1, 2, 2), side=96)
        joined = 8 * xs[0][0].nbytes

        async def batch() -> list[dict[str, np.ndarray]]:
            return await _batched(batcher, xs)

        await batcher.infer({"data": xs[0]})
        await batch()  # the plan of 8 items made, and every cache warm
        tracemalloc.start()
        try:
            tracemalloc.reset_peak()
            answers = await batch()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert batcher.statistics.batch_sizes[5] == 2
        assert peak < joined // 8, (peak, joined)
        for x, answer in zip(xs, answers, strict=True):
            alone = (await net.run({"data": x}))["out"]
            np.testing.assert_allclose(answer["out"], alone, rtol=1e-6, atol=1e-6)


async def test_bad_inputs_are_refused_as_a_joined_batch_is(tmp_path: Path) -> None:
    async with await _net(tmp_path) as net:
        ex = net.create_extractor()
        with pytest.raises(InputError, match=r"input 'data': dtype bool is not a real number"):
            ex.input("data", ItemBatch([np.zeros((1, 3, 10, 12), bool)], 2))
        with pytest.raises(InputError, match=r"input 'data': a batch of 0 items"):
            ex.input("data", ItemBatch([np.zeros((0, 3, 10, 12), np.float32)]))
        with pytest.raises(InputError, match="has its batch axis first"):
            ex.input("data", ItemBatch([_image(0, 1)]), batch_axis=False)
        with pytest.raises(ValueError, match="items of one shape"):
            ItemBatch([_image(0, 1), np.zeros((1, 3, 10, 13), np.float32)])
        # two channels where the model takes three: a batch of 1 + 2 items (padded to 4) is
        # refused with the joined batch's error, to each request
        two = [np.ones((n, 2, 10, 12), np.float32) for n in (1, 2)]
        joined = net.create_extractor()
        joined.input("data", np.concatenate([*two, np.zeros((1, 2, 10, 12), np.float32)]))
        with pytest.raises(InputError) as alone:
            await joined.extract_many(OUTPUTS)
        group = [BatchItem({"data": x}, tuple(OUTPUTS)) for x in two]
        answers = await run_grouped(net, group, max_batch=8)
        assert [type(a) for a in answers] == [InputError, InputError]
        assert str(answers[0]) == str(answers[1]) == str(alone.value)


def test_an_item_batch_is_its_requests_arrays() -> None:
    a, b = _image(1, 2), _image(2, 1)
    batch = ItemBatch([a, b], 4)
    assert (batch.shape, batch.items, len(batch), batch.ndim) == ((4, 3, 10, 12), 3, 4, 4)
    assert np.shares_memory(batch[1], a) and np.shares_memory(batch[2], b)
    assert not batch[3].any() and not batch[3].flags.writeable  # padding: zeros if asked
    np.testing.assert_array_equal(np.asarray(batch), np.concatenate([a, b, batch[3][None]]))
    assert batch.float32() is batch
    with pytest.raises(IndexError):
        batch[4]
    with pytest.raises(ValueError, match="cannot hold 3"):
        ItemBatch([a, b], 2)


def test_a_request_whose_inputs_hold_different_items_is_refused() -> None:
    """Ray's batch path: its rows would be another request's answers."""
    two_items, one_item = _image(1, 2), _image(2, 1)
    with pytest.raises(InputError, match="same number of items"):
        BatchItem({"a": two_items, "b": one_item}, ("out",))
    assert BatchItem({"a": two_items, "b": two_items}, ("out",)).items == 2
