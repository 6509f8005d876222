"""One model behind Ray Serve: each replica holds the model on one GPU through a Net and speaks
the Open Inference Protocol over HTTP (KServe v2: ``/v2/health/ready``, ``/v2/models/NAME``,
``.../config``, ``.../infer`` with JSON or binary tensors) through Ray Serve's proxy, so
``tritonclient.http`` works unchanged. Needs ``pip install 'asyncvk-runtime[ray]'``.

A replica reads the pipeline cache's Redis tier at load and fills it after (``remote_cache``),
so a replica that starts after another has loaded compiles nothing. Requests are batched by
asyncvk's own batcher (``batcher="asyncvk"``, the default) or by Ray Serve's ``@serve.batch``
(``batcher="ray"``); docs/ray.md compares the two.

Example::

    from ray import serve
    from asyncvk.serve.ray_serve import asyncvk_deployment

    serve.run(asyncvk_deployment("model.param", "model.bin", name="cunet", num_replicas=2))
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import ray
from ray import serve
from ray.serve import Application, Deployment
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from .._version import __version__
from ..net._net import Net
from ..net._option import Option
from ._batcher import Batcher, BatchSettings
from ._grouped_batch import BatchItem, item_count, run_grouped
from ._oip_infer_body import (
    HEADER_LENGTH,
    encode_reply,
    failure_status,
    parse_request,
    split_body,
)
from ._protocol import NoSuchModel, config, model_metadata_of, model_named
from ._replica_device import replica_option
from ._repository import ModelFiles, ServedModel, name_for

__all__ = ["BATCHERS", "AsyncVkModel", "AsyncVkReplica", "asyncvk_deployment", "build_app"]

log = logging.getLogger("asyncvk.serve")

#: who forms the batches: asyncvk's batcher in the replica, or Ray Serve's ``@serve.batch``
BATCHERS = ("asyncvk", "ray")
#: the protocol's extensions a replica serves (no statistics or repository over Ray)
EXTENSIONS = ["binary_tensor_data", "model_configuration"]


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


class AsyncVkReplica:
    """A replica of :data:`AsyncVkModel`: one model on one GPU, answering the Open Inference
    Protocol over HTTP.

    Handle methods: :meth:`statistics` (this replica's answers, batches and pipeline cache
    counters) and :meth:`flush_cache` (wait for the push to the Redis tier).
    """

    async def __init__(  # type: ignore[misc]  # Ray Serve awaits an async constructor
        self,
        param: str,
        bin: str,
        *,
        name: str,
        option: Option,
        settings: BatchSettings,
        batcher: str,
        max_body: int,
    ) -> None:
        self._replica = serve.get_replica_context().replica_tag
        net = Net(replica_option(option, ray.get_gpu_ids()))
        try:
            await net.load_param(param)
            await net.load_model(bin)
        except Exception as exc:
            raise RuntimeError(
                f"replica {self._replica}: model {name!r} did not load from {param} and {bin}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        self._model = ServedModel(ModelFiles(name, param, bin), net, Batcher(net, settings))
        self._model.ready = True
        self._use_ray_batch = batcher == "ray"
        self._max_body = max_body
        self._answers = 0
        self._ray_batches = 0
        self._ray_items = 0
        ray_batch: Any = self._ray_batch  # Ray's batch wrapper, typed as the method it wraps
        ray_batch.set_max_batch_size(settings.max_batch)
        ray_batch.set_batch_wait_timeout_s(settings.max_queue_delay)

    async def __call__(self, request: Request) -> Response:
        """Route one HTTP request of the protocol."""
        path = request.url.path
        root = request.scope.get("root_path", "")  # the app's route_prefix, when not "/"
        if root and path.startswith(root):
            path = path[len(root) :]
        parts = path.strip("/").split("/")
        get = request.method in ("GET", "HEAD")
        if parts == ["v2"] and get:
            metadata = {"name": "asyncvk", "version": __version__, "extensions": EXTENSIONS}
            return JSONResponse(metadata)
        if parts == ["v2", "health", "live"] and get:
            return JSONResponse({"live": True})
        if parts == ["v2", "health", "ready"] and get:
            return JSONResponse({"ready": True})  # a replica takes requests once loaded
        if len(parts) < 3 or parts[:2] != ["v2", "models"]:
            return _error(404, f"no route {request.method} {request.url.path}")
        name, rest = parts[2], parts[3:]
        version = None
        if rest[:1] == ["versions"] and len(rest) >= 2:
            version, rest = rest[1], rest[2:]
        try:
            model = model_named({self._model.name: self._model}, name, version)
        except NoSuchModel as exc:
            return _error(404, str(exc))
        if rest == [] and get:
            return JSONResponse(model_metadata_of(model))
        if rest == ["ready"] and get:
            return JSONResponse({"name": model.name, "ready": True})
        if rest == ["config"] and get:
            return JSONResponse(config(model))
        if rest == ["infer"] and request.method == "POST":
            return await self._infer(request)
        return _error(404, f"no route {request.method} {request.url.path}")

    async def _infer(self, request: Request) -> Response:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self._max_body:
            return _error(413, f"request body over {self._max_body:,} bytes (max_body)")
        body = await request.body()
        if len(body) > self._max_body:
            return _error(413, f"request body over {self._max_body:,} bytes (max_body)")
        net = self._model.net
        try:
            header, tensors = split_body(body, request.headers.get(HEADER_LENGTH))
            inputs, batched, wanted, binary = parse_request(net, header, tensors)
            if self._use_ray_batch:
                outputs = tuple(net.output_names if wanted is None else wanted)
                results = await self._ray_infer(BatchItem(inputs, outputs))
            else:
                results = await self._model.batcher.infer(inputs, wanted)
        except Exception as exc:
            answer = failure_status(exc)
            if answer is not None:
                return _error(*answer)
            log.exception("inference failed")  # a server bug still answers the protocol's JSON
            return _error(500, f"{type(exc).__name__}: {exc}")
        if not batched:
            results = {n: a[0] for n, a in results.items()}
        reply, json_length = encode_reply(self._model.name, header.get("id"), results, binary)
        self._answers += 1
        if json_length is None:
            return Response(reply, media_type="application/json")
        return Response(
            reply,
            media_type="application/octet-stream",
            headers={HEADER_LENGTH: str(json_length)},
        )

    async def _ray_infer(self, item: BatchItem) -> dict[str, np.ndarray]:
        max_batch = self._model.batcher.settings.max_batch
        if item.items > max_batch:  # Ray refuses it; asyncvk's batcher runs it alone
            self._ray_batches += 1
            self._ray_items += item.items
            result = (await run_grouped(self._model.net, [item], max_batch))[0]
        else:
            result = await self._ray_batch(item)
        if isinstance(result, Exception):
            raise result
        return result

    @serve.batch(
        max_batch_size=32,
        batch_wait_timeout_s=0.0,
        max_concurrent_batches=2,  # as asyncvk's batcher: one runs while the next gathers
        batch_size_fn=item_count,
    )
    async def _ray_batch(self, batch: list[BatchItem]) -> list[dict[str, np.ndarray] | Exception]:
        """Ray Serve's batch, run by groups of one input shape and outputs."""
        self._ray_batches += len({item.key for item in batch})
        self._ray_items += item_count(batch)
        max_batch = self._model.batcher.settings.max_batch
        return await run_grouped(self._model.net, batch, max_batch)

    async def statistics(self) -> dict[str, Any]:
        """This replica's counters: ``replica`` (Ray Serve's replica tag), ``answers``
        (inferences answered), ``batches`` and ``items`` (as its batcher formed them),
        ``cache`` (``PipelineCache.statistics()`` as a dict; None on the CPU) and ``remote``
        (the Redis tier's counters; None without one)."""
        net = self._model.net
        if self._use_ray_batch:
            batches, items = self._ray_batches, self._ray_items
        else:
            s = self._model.batcher.statistics
            batches, items = s.batches, s.items
        cache = net.cache
        return {
            "replica": self._replica,
            "model": self._model.name,
            "batcher": "ray" if self._use_ray_batch else "asyncvk",
            "answers": self._answers,
            "batches": batches,
            "items": items,
            "cache": None if cache is None else dataclasses.asdict(cache.statistics()),
            "remote": net.remote_status,
        }

    async def flush_cache(self) -> None:
        """Wait until what this replica built is saved: its cache folder and its push to the
        Redis tier (which runs in the background after load)."""
        await self._model.net.flush_cache()

    async def __del__(self) -> None:
        """Ray Serve's shutdown: answer what was taken, then close the Net (its cache saved)."""
        model = getattr(self, "_model", None)
        if model is not None:
            await model.batcher.drain()
            await model.net.aclose()


#: The deployment: :class:`AsyncVkReplica` as Ray Serve runs it (``.options()``, ``.bind()``).
AsyncVkModel = cast(  # Ray types the decorator's class form as the decorator itself
    Deployment, serve.deployment(AsyncVkReplica, name="AsyncVkModel", max_ongoing_requests=128)
)


def asyncvk_deployment(
    param: str,
    bin: str,
    *,
    name: str | None = None,
    remote_cache: str | None = None,
    option: Option | None = None,
    num_replicas: int = 1,
    num_gpus: float = 1,
    max_batch: int = 32,
    max_queue_delay: float = 0.0,
    max_queue: int = 256,
    batcher: str = "asyncvk",
    max_ongoing_requests: int = 128,
    max_body: int = 64 << 20,
    ray_actor_options: dict[str, Any] | None = None,
) -> Application:
    """The Ray Serve app for one model: pass it to ``serve.run``.

    Arguments:
        param (str): the ``.param`` file, as the replicas' machines see it.
        bin (str): the ``.bin`` file beside it.
        name (str): the model's name in URLs (by default after its files).
        remote_cache (str): the pipeline cache's Redis tier, ``redis://host:port/db``
            (None: ``option.remote_cache``, else ``ASYNCVK_REMOTE_CACHE`` on the replica).
        option (Option): how each replica's Net loads and runs (no ``pipeline_cache``: each
            replica makes its own).
        num_replicas (int): replicas; each holds the model on a GPU of its own.
        num_gpus (float): GPUs Ray reserves per replica (0: the default Vulkan device,
            e.g. a CPU one, without a reservation).
        max_batch (int): items in one batch.
        max_queue_delay (float): seconds the first request of a batch waits for others.
        max_queue (int): requests that may wait in asyncvk's batcher (beyond, 503).
        batcher (str): ``"asyncvk"`` (asyncvk's batcher) or ``"ray"`` (``@serve.batch``).
        max_ongoing_requests (int): requests Ray Serve lets into one replica at once; the
            batcher can only join those.
        max_body (int): a request's bytes (beyond, 413).
        ray_actor_options (dict): more of the replicas' Ray actor options (``runtime_env``,
            ``resources``, ...); their GPUs are ``num_gpus``.

    Raises:
        ValueError: a setting that cannot work, named.
    """
    if batcher not in BATCHERS:
        raise ValueError(f"batcher must be one of {BATCHERS}, got {batcher!r}")
    for label, value, least in (
        ("num_replicas", num_replicas, 1),
        ("max_ongoing_requests", max_ongoing_requests, 1),
        ("max_body", max_body, 1),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{label} must be an integer of at least {least}, got {value!r}")
    if not num_gpus >= 0:
        raise ValueError(f"num_gpus must be 0 or more, got {num_gpus!r}")
    actor_options = dict(ray_actor_options or {})
    if "num_gpus" in actor_options:
        raise ValueError("ray_actor_options: give the replicas' GPUs as num_gpus=")
    actor_options["num_gpus"] = num_gpus
    option = option or Option()
    if option.pipeline_cache is not None:
        raise ValueError(
            "option.pipeline_cache must be None: a PipelineCache holds one process's device "
            "objects and cannot travel to a replica (each replica makes its own)"
        )
    if remote_cache is not None:
        option = dataclasses.replace(option, remote_cache=remote_cache)
    files = ModelFiles(name or name_for(param), param, bin)  # checks the name
    settings = BatchSettings(
        max_batch=max_batch, max_queue_delay=max_queue_delay, max_queue=max_queue
    )
    deployment = AsyncVkModel.options(
        num_replicas=num_replicas,
        ray_actor_options=actor_options,
        max_ongoing_requests=max_ongoing_requests,
    )
    return deployment.bind(
        files.param,
        files.bin,
        name=files.name,
        option=option,
        settings=settings,
        batcher=batcher,
        max_body=max_body,
    )


#: the keys of :func:`build_app`'s arguments that are numbers
_INTEGERS = ("num_replicas", "max_batch", "max_queue", "max_ongoing_requests", "max_body")
_REALS = ("num_gpus", "max_queue_delay")
_TEXTS = ("param", "bin", "name", "remote_cache", "batcher")


def build_app(args: dict[str, Any]) -> Application:
    """The app from a Serve config's ``args`` (``import_path:
    asyncvk.serve.ray_serve:build_app``) or ``serve run ... key=value``: the keys of
    :func:`asyncvk_deployment`, and ``option``, a mapping of :class:`~asyncvk.Option` fields.

    Raises:
        ValueError: an unknown key, a missing file name, or a value of the wrong kind.
    """
    known = ("option", *_INTEGERS, *_REALS, *_TEXTS)
    unknown = sorted(set(args) - set(known))
    if unknown:
        raise ValueError(f"build_app: unknown argument(s) {unknown} (known: {sorted(known)})")
    for need in ("param", "bin"):
        if not isinstance(args.get(need), str):
            raise ValueError(f"build_app: {need!r} must be given as a file name")
    kwargs: dict[str, Any] = {}
    for key, value in args.items():
        kwargs[key] = _converted(key, value)
    return asyncvk_deployment(kwargs.pop("param"), kwargs.pop("bin"), **kwargs)


def _converted(key: str, value: Any) -> Any:
    """A config value as :func:`asyncvk_deployment` takes it (the command line gives text)."""
    kinds: Sequence[tuple[tuple[str, ...], type]] = ((_INTEGERS, int), (_REALS, float))
    for keys, kind in kinds:
        if key in keys:
            try:
                return kind(value)
            except (TypeError, ValueError):
                raise ValueError(f"build_app: {key} must be a number, got {value!r}") from None
    if key == "option":
        if not isinstance(value, dict):
            raise ValueError(f"build_app: option must be a mapping of Option fields, got {value!r}")
        try:
            return Option(**value)
        except TypeError as exc:
            raise ValueError(f"build_app: option: {exc}") from None
    if not isinstance(value, str):
        raise ValueError(f"build_app: {key} must be text, got {value!r}")
    return value
