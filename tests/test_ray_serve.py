"""The Ray Serve deployment on a real local Ray instance and a real redis-server: two replicas of
cunet answer ``tritonclient.http`` through Ray Serve's HTTP proxy as asyncvk's CPU path does,
and replicas that start after a first one pushed to Redis compile nothing."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from redis_server import RedisServer, free_port
from tritonclient.utils import InferenceServerException

from asyncvk import Net, Option

with warnings.catch_warnings():
    # Ray's own pydantic models use pydantic 1's Field keywords: not this suite's to fix
    warnings.simplefilter("ignore", DeprecationWarning)
    import ray
    from ray import serve
    from ray.serve import Application

    from asyncvk.serve.ray_serve import asyncvk_deployment, build_app

CUNET = Path(__file__).parent / "models" / "cunet"
#: distinct inputs, so that an answer sliced from the wrong place in a batch shows
INPUTS = [np.load(CUNET / "input.npy")[np.newaxis] * (1 + i / 50) for i in range(8)]
#: the fleet's signing key: driver blobs go through Redis only between processes that share one
KEY = "fleet secret"
#: seconds to wait for a state that is reached in a few on an idle machine
PATIENCE = 120.0


@pytest.fixture(scope="module")
def expected() -> list[np.ndarray]:
    """asyncvk's CPU path on each input: what every answer is checked against."""

    async def run() -> list[np.ndarray]:
        async with Net(Option(use_vulkan_compute=False)) as net:
            await net.load_param(CUNET / "model.param")
            await net.load_model(CUNET / "model.bin")
            return [(await net.run({"in0": x[0]}))["out0"] for x in INPUTS]

    return asyncio.run(run())


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A local Ray instance (``ray.init`` starts its processes and ``ray.shutdown`` stops
    them), with Serve's HTTP proxy on a free loopback port: that address."""
    folder = tempfile.mkdtemp(prefix="ray-")  # short: Ray's socket paths are bounded
    env = {
        # compiles must happen to be counted (the install's SPIR-V folder is off in the suite)
        "ASYNCVK_PACKAGED_SPIRV": "0",
        "MESA_SHADER_CACHE_DISABLE": "true",
        "XDG_CONFIG_HOME": os.environ["XDG_CONFIG_HOME"],  # the suite's own cache key
        "ASYNCVK_REMOTE_CACHE_KEY": KEY,
    }
    ray.init(
        num_cpus=4,
        include_dashboard=False,
        _temp_dir=folder,
        _node_ip_address="127.0.0.1",
        runtime_env={"env_vars": env},
        log_to_driver=False,
    )
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        yield f"127.0.0.1:{port}"
        serve.shutdown()
    finally:
        ray.shutdown()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def redis_url(tmp_path: Path) -> Iterator[str]:
    server = RedisServer(tmp_path)
    yield server.url
    server.stop()


def _infer(client: httpclient.InferenceServerClient, x: np.ndarray, binary: bool) -> np.ndarray:
    data = httpclient.InferInput("in0", list(x.shape), "FP32")
    data.set_data_from_numpy(x, binary_data=binary)
    wanted = httpclient.InferRequestedOutput("out0", binary_data=binary)
    out = client.infer("cunet", [data], outputs=[wanted]).as_numpy("out0")
    assert out is not None
    return out


def _check(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == (1, *want.shape)
    assert np.linalg.norm(got[0] - want) / np.linalg.norm(want) < 1e-3


def _answer_all(url: str, expected: list[np.ndarray], binary: bool = True) -> None:
    """Every input at once, from as many clients, each answer checked."""

    def one(i: int) -> None:
        client = httpclient.InferenceServerClient(url)
        try:
            _check(_infer(client, INPUTS[i], binary), expected[i])
        finally:
            client.close()

    with ThreadPoolExecutor(len(INPUTS)) as pool:
        list(pool.map(one, range(len(INPUTS))))


def _replicas_until(
    handle: Any, done: Callable[[dict[str, dict[str, Any]]], bool], act: Callable[[], None]
) -> dict[str, dict[str, Any]]:
    """Each replica's latest statistics by its tag, once ``done`` holds of them (``act`` runs
    between looks; a handle call goes to any replica, so each look asks several times)."""
    seen: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + PATIENCE
    while not done(seen):
        assert time.monotonic() < deadline, f"not reached in {PATIENCE} s: {seen}"
        act()
        for _ in range(8):
            stats = handle.statistics.remote().result()
            seen[stats["replica"]] = stats
    return seen


def _app(redis_url: str | None, **settings: Any) -> Any:
    return asyncvk_deployment(
        str(CUNET / "model.param"),
        str(CUNET / "model.bin"),
        name="cunet",
        remote_cache=redis_url,
        num_gpus=0,  # lavapipe: the default Vulkan device, no GPU reserved
        **settings,
    )


def test_replicas_answer_tritonclient_and_later_ones_start_warm_from_redis(
    cluster: str, redis_url: str, expected: list[np.ndarray]
) -> None:
    handle = serve.run(_app(redis_url, num_replicas=1), name="cunet", route_prefix="/")
    client = httpclient.InferenceServerClient(cluster)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready("cunet")
    metadata = client.get_model_metadata("cunet")
    assert [t["name"] for t in metadata["inputs"]] == ["in0"]
    assert [t["name"] for t in metadata["outputs"]] == ["out0"]
    assert client.get_model_config("cunet")["max_batch_size"] == 32
    _check(_infer(client, INPUTS[0], binary=False), expected[0])  # JSON tensors
    _answer_all(cluster, expected)  # binary tensors, concurrent
    handle.flush_cache.remote().result()  # the push to Redis is done
    first = handle.statistics.remote().result()
    assert first["cache"]["spirv_compiles"] > 0, first  # a cold start: it compiled
    assert first["remote"] is not None, "the replica has no remote cache"
    assert first["remote"]["on"] and first["remote"]["pushed"] > 0, first["remote"]

    # two replicas: Serve replaces the first, so both start after its push
    handle = serve.run(_app(redis_url, num_replicas=2), name="cunet", route_prefix="/")

    def both_answered(seen: dict[str, dict[str, Any]]) -> bool:
        new = [s for tag, s in seen.items() if tag != first["replica"]]
        return len(new) == 2 and all(s["answers"] > 0 for s in new)

    seen = _replicas_until(handle, both_answered, lambda: _answer_all(cluster, expected))
    for tag, stats in seen.items():
        if tag == first["replica"]:
            continue
        cache, remote = stats["cache"], stats["remote"]
        # no shader compiled again: every one the first compiled came from Redis
        assert cache["spirv_compiles"] == 0 and cache["glsl_seconds"] == 0, cache
        assert remote["hits"] >= first["cache"]["spirv_compiles"], remote
        assert remote["rejected"] == 0 and remote["pushed"] == 0, remote
        assert cache["spirv_hits"] == cache["pipelines_created"] > 0, cache
    serve.delete("cunet")


def test_ray_s_batcher_answers_as_asyncvk_s_under_a_route_prefix(
    cluster: str, expected: list[np.ndarray]
) -> None:
    handle = serve.run(
        _app(None, batcher="ray", max_batch=len(INPUTS), max_queue_delay=2.0),
        name="cunet-ray",
        route_prefix="/ray",
    )
    url = f"{cluster}/ray"
    _answer_all(url, expected)
    _answer_all(url, expected, binary=False)
    client = httpclient.InferenceServerClient(url)
    # more items than a batch holds: Ray's batcher refuses such a request, so it runs alone
    many = np.concatenate([*INPUTS, INPUTS[0]])
    data = httpclient.InferInput("in0", list(many.shape), "FP32")
    data.set_data_from_numpy(many)
    got = client.infer("cunet", [data]).as_numpy("out0")
    assert got is not None and len(got) == len(many)
    for y, want in zip(got, [*expected, expected[0]], strict=True):
        _check(y[np.newaxis], want)
    stats = handle.statistics.remote().result()
    assert stats["batcher"] == "ray" and stats["answers"] == 2 * len(INPUTS) + 1
    assert stats["items"] == 3 * len(INPUTS) + 1
    assert stats["cache"]["pipelines_created"] > 0  # on the Vulkan device, not the CPU
    with pytest.raises(InferenceServerException, match="unknown model 'nope'"):
        client.get_model_metadata("nope")
    bad = httpclient.InferInput("in1", [1, 3, 44, 44], "FP32")
    bad.set_data_from_numpy(INPUTS[0])
    with pytest.raises(InferenceServerException, match="unknown input 'in1'"):
        client.infer("cunet", [bad])
    serve.delete("cunet-ray")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"bin": "m.bin"}, "'param' must be given"),
        (
            {"param": "m.param", "bin": "m.bin", "replicas": 2},
            r"unknown argument\(s\) \['replicas'\]",
        ),
        ({"param": "m.param", "bin": "m.bin", "max_batch": "many"}, "max_batch must be a number"),
        ({"param": "m.param", "bin": "m.bin", "batcher": "torch"}, "batcher must be one of"),
        ({"param": "m.param", "bin": "m.bin", "num_replicas": 0}, "num_replicas must be"),
        ({"param": "m.param", "bin": "m.bin", "option": {"fp16": True}}, "option: .*fp16"),
        ({"param": "m.param", "bin": "m.bin", "name": "a b"}, "the name 'a b' must be"),
    ],
)
def test_a_bad_config_argument_is_named(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_app(args)


def test_the_docs_serve_config_is_one_ray_accepts() -> None:
    """docs/ray.md's config file passes Ray's own schema, names this deployment and builds."""
    import importlib

    import yaml
    from ray.serve.schema import ServeDeploySchema

    page = (Path(__file__).resolve().parent.parent / "docs" / "ray.md").read_text()
    [block] = re.findall(r"```yaml\n(.*?)```", page, flags=re.S)
    config = ServeDeploySchema.model_validate(yaml.safe_load(block))
    [app] = config.applications
    module, _, name = app.import_path.partition(":")
    assert getattr(importlib.import_module(module), name) is build_app
    assert [d.name for d in app.deployments] == ["AsyncVkModel"]
    assert isinstance(build_app(app.args), Application)
