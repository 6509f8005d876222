"""Every output from one forward (``Net.run``, ``Extractor.extract_many``), an Extractor that
keeps what its forward computed, and batches: N items in one plan and one submission per
segment, each item equal to a run of its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from asyncvk import InputError, Net, Option
from asyncvk.layers._base import Layer
from asyncvk.net._plan import PlanRequest
from asyncvk.net._random_weights import random_weights

#: Three outputs: two tops of one Slice (computed together), and a branch of their own that
#: shares the first convolution with them. ``{mask}`` is the head's featmask (16: on the CPU).
PARAM = """7767517
7 9
Input            data     0 1 data 0=12 1=10 2=3
Convolution      conv0    1 1 data c0 0=8 1=3 4=1 5=1 6=216 9=1
Split            split0   1 2 c0 c0a c0b
Convolution      head0    1 1 c0a h0 0=4 1=1 5=1 6=32 31={mask}
Slice            slice0   1 2 h0 boxes scores -23300=2,-233,-233 1=0
Pooling          pool0    1 1 c0b p0 0=1 4=1
InnerProduct     fc0      1 1 p0 logits 0=5 1=1 2=40
"""
OUTPUTS = ["boxes", "scores", "logits"]


def _write(tmp_path: Path, mask: int = 0) -> tuple[Path, Path]:
    param = tmp_path / "three.param"
    param.write_text(PARAM.format(mask=mask))
    weights = tmp_path / "three.bin"
    weights.write_bytes(random_weights(param, seed=3))
    return param, weights


async def _net(tmp_path: Path, gpu: bool = True, mask: int = 0) -> Net:
    param, weights = _write(tmp_path, mask)
    net = Net(Option(use_vulkan_compute=gpu))
    await net.load_param(param)
    await net.load_model(weights)
    return net


def _image(seed: int, *batch: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (*batch, 3, 10, 12)).astype(np.float32)


async def _each_alone(net: Net, x: np.ndarray) -> dict[str, np.ndarray]:
    """Every output, each from an extractor of its own (one forward each)."""
    out = {}
    for name in OUTPUTS:
        ex = net.create_extractor()
        ex.input("data", x)
        out[name] = await ex.extract(name)
    return out


async def test_run_returns_every_output_from_one_forward(tmp_path: Path) -> None:
    async with await _net(tmp_path) as net, await _net(tmp_path, gpu=False) as cpu:
        assert net.output_names == OUTPUTS
        x = _image(0)
        expected = await _each_alone(cpu, x)
        await net.run({"data": x})  # the plan recorded
        before = net.device.submissions
        outputs = await net.run({"data": x})
        assert net.device.submissions - before == 1  # one segment: one submission
        assert list(outputs) == OUTPUTS
        for name in OUTPUTS:
            np.testing.assert_allclose(outputs[name], expected[name], rtol=1e-4, atol=1e-5)
        assert (await net.run({"data": x}, outputs=["logits"])).keys() == {"logits"}
        with pytest.raises(InputError, match=r"no blob named 'nope' \(outputs: \['boxes'"):
            await net.run({"data": x}, outputs=["nope"])
        with pytest.raises(InputError, match=r"input blob\(s\) \['data'\] were not set"):
            await net.run({})


@pytest.mark.parametrize("gpu", [True, False], ids=["gpu", "cpu"])
async def test_an_extractor_keeps_what_its_forward_computed(tmp_path: Path, gpu: bool) -> None:
    async with await _net(tmp_path, gpu) as net:
        x = _image(1)
        expected = await _each_alone(net, x)
        ran: list[str] = []
        for node in net.nodes:  # each layer's numpy forward, where the CPU runs it
            _spy(node.layer, ran)
        ex = net.create_extractor()
        ex.input("data", x)
        submitted = net.device.submissions if gpu else 0
        boxes = await ex.extract("boxes")
        # the Slice made both: scores costs nothing more
        scores = await ex.extract("scores")
        if gpu:
            assert net.device.submissions - submitted == 1
        else:
            assert ran == ["conv0", "split0", "head0", "slice0"]
        # logits shares conv0 with them: only the layers of its own branch run
        logits = await ex.extract("logits")
        if gpu:
            assert net.device.submissions - submitted == 2
            (plan,) = [p for r, ps in net._plans.items() for p in ps if _reads(net, r) == {"c0b"}]
            assert plan.gpu_layer_count == 2  # pool0 and fc0, from the kept c0b
        else:
            assert ran == ["conv0", "split0", "head0", "slice0", "pool0", "fc0"]
        for name, got in (("boxes", boxes), ("scores", scores), ("logits", logits)):
            np.testing.assert_allclose(got, expected[name], rtol=1e-5, atol=1e-6)
        assert np.shares_memory(await ex.extract("boxes"), boxes)  # kept, not computed again
        ex.input("data", _image(2))  # new inputs: what was computed is forgotten
        assert not np.allclose(await ex.extract("boxes"), boxes)


def _spy(layer: Layer, ran: list[str]) -> None:
    """Note ``layer``'s name in ``ran`` whenever its numpy forward runs."""
    forward = layer.forward

    def spied(inputs: list[np.ndarray]) -> list[np.ndarray]:
        ran.append(layer.name)
        return forward(inputs)

    layer.forward = spied  # type: ignore[method-assign]


def _reads(net: Net, request: PlanRequest) -> set[str]:
    """The blobs a plan's host writes, by name."""
    return {net.blob_names[b] for b, _ in request.inputs}


@pytest.mark.parametrize(
    ("gpu", "mask"), [(True, 0), (True, 16), (False, 0)], ids=["gpu", "cpu-layer-inside", "cpu"]
)
async def test_a_batch_is_each_item_run_alone(tmp_path: Path, gpu: bool, mask: int) -> None:
    async with await _net(tmp_path, gpu, mask) as net:
        batch = _image(4, 5)
        alone = [await net.run({"data": item}) for item in batch]
        outputs = await net.run({"data": batch})
        for name in OUTPUTS:
            assert outputs[name].shape == (5, *alone[0][name].shape)
            for i in range(5):
                np.testing.assert_allclose(outputs[name][i], alone[i][name], rtol=1e-5, atol=1e-6)
        if not gpu:
            return
        recorded, before = net.commands_recorded, net.device.submissions
        again = await net.run({"data": batch})  # the same batch: replayed, not recorded
        assert net.commands_recorded == recorded
        segments = 2 if mask else 1  # a CPU layer between two GPU segments
        assert net.device.submissions - before == segments  # one submission per segment
        for name in OUTPUTS:
            np.testing.assert_array_equal(again[name], outputs[name])
        (plan,) = [p for r, ps in net._plans.items() if r.batch == 5 for p in ps]
        assert plan.describe()["batch"] == 5


async def test_a_batch_of_one_keeps_its_axis_and_plain_items_have_none(tmp_path: Path) -> None:
    async with await _net(tmp_path) as net:
        x = _image(5)
        plain = await net.run({"data": x})
        one = await net.run({"data": x[np.newaxis]})
        for name in OUTPUTS:
            assert one[name].shape == (1, *plain[name].shape)
            np.testing.assert_array_equal(one[name][0], plain[name])


async def test_batches_that_cannot_be_are_input_errors(tmp_path: Path) -> None:
    param = tmp_path / "two.param"
    param.write_text("7767517\n3 3\nInput a 0 1 a\nInput b 0 1 b\nBinaryOp add 2 1 a b out 0=0\n")
    async with Net(Option(use_vulkan_compute=False)) as net:
        await net.load_param(param)
        await net.load_model(b"")
        ex = net.create_extractor()
        ex.input("a", np.ones((2, 3, 4, 5)))  # no shape declared: 4 dims are a batch
        with pytest.raises(
            InputError,
            match=r"input 'b' has no batch axis \(shape \(3, 4, 5\)\) but input 'a' has a batch "
            r"of 2: every input needs the same",
        ):
            ex.input("b", np.ones((3, 4, 5)))
        with pytest.raises(InputError, match=r"input 'b' has a batch of 3 .* 'a' has a batch of 2"):
            ex.input("b", np.ones((3, 3, 4, 5)))
        with pytest.raises(InputError, match=r"input 'b': a batch of 0 items \(shape \(0, 3"):
            ex.input("b", np.ones((0, 3, 4, 5)))
        with pytest.raises(InputError, match="items of a batch must have 1 to 4 dims"):
            ex.input("b", np.ones((2, 1, 2, 3, 4, 5)))
        ex.input("b", np.ones((2, 3, 4, 5)))
        assert (await ex.extract("out")).shape == (2, 3, 4, 5)
        # a 4-dim blob of ncnn's own (c, d, h, w): said so, it is one item
        ex = net.create_extractor()
        ex.input("a", np.ones((2, 3, 4, 5)), batch_axis=False)
        ex.input("b", np.full((2, 3, 4, 5), 2.0), batch_axis=False)
        np.testing.assert_array_equal(await ex.extract("out"), np.full((2, 3, 4, 5), 3.0))
