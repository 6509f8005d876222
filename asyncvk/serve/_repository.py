"""The models a server serves: found in a folder (``NAME/model.param`` + ``model.bin``) or
named one by one, each with its Net and its batcher, all on one device and one pipeline cache;
or, with ``devices``, each model on every one of those devices (a NetGroup, each member with
its own device and pipeline cache), its batches sent to the device that will finish first."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Literal

from ..cache._pipeline_cache import PipelineCache
from ..net._net import Net
from ..net._net_group import NetGroup
from ..net._option import Option
from ._batcher import Batcher, BatchSettings, BatchStatistics
from ._warm_up import warm_up, warm_up_batches

log = logging.getLogger("asyncvk.serve")

#: what a model's name may hold: it is a URL path segment and a metrics label
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


class UnknownModel(LookupError):
    """No model of that name is served, or (with a folder) in the folder."""


@dataclass(frozen=True)
class ModelFiles:
    """One model to serve: its name (in URLs) and its two files."""

    name: str
    param: str
    bin: str

    def __post_init__(self) -> None:
        check_name(self.name, f"model {self.param}")


def check_name(name: str, where: str) -> None:
    """ValueError unless ``name`` can be a model's name in a URL and a metrics label."""
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(
            f"{where}: the name {name!r} must be letters, digits, '_', '.' and '-' "
            "(starting with a letter or digit, at most 128)"
        )


def name_for(param: str) -> str:
    """A model's default name: its ``.param``'s stem, or its folder's name for
    ``NAME/model.param``."""
    folder, file = os.path.split(os.path.abspath(param))
    stem = os.path.splitext(file)[0]
    return os.path.basename(folder) if stem == "model" else stem


def find_models(folder: str) -> list[ModelFiles]:
    """Every ``folder/NAME/model.param`` with its ``model.bin``, by name; ValueError naming
    what is wrong (no such folder, no model in it, a model without its weights)."""
    if not os.path.isdir(folder):
        raise ValueError(f"--models {folder}: no such folder")
    found = []
    for name in sorted(os.listdir(folder)):
        param = os.path.join(folder, name, "model.param")
        if not os.path.isfile(param):
            continue
        weights = os.path.join(folder, name, "model.bin")
        if not os.path.isfile(weights):
            raise ValueError(f"--models {folder}: {param} has no model.bin beside it")
        found.append(ModelFiles(name, param, weights))
    if not found:
        raise ValueError(f"--models {folder}: no NAME/model.param in it")
    return found


@dataclass(eq=False)
class ServedModel:
    """A model in the server: its files, its Net and batcher, and how its load went."""

    files: ModelFiles
    #: its Net, or its NetGroup when it is served on several devices
    runner: Net | NetGroup
    batcher: Batcher
    ready: bool = False
    error: str | None = None
    load_seconds: float = 0.0
    warm_up_seconds: float = 0.0
    #: wall-clock time of the last inference, in ms since the epoch (0: none yet)
    last_inference_ms: int = 0
    versions: tuple[str, ...] = field(default=("1",))
    #: the files' (mtime, size) when they were loaded: a poll reloads the model when they change
    stamp: tuple[int, ...] = ()

    @property
    def name(self) -> str:
        return self.files.name

    @property
    def net(self) -> Net:
        """The Net that describes the model (its names and graph): a group's first member
        still serving (a member taken out at load has no model), or an unloaded one before
        the group has loaded."""
        runner = self.runner
        if isinstance(runner, Net):
            return runner
        nets = runner.serving_nets or runner.nets
        return nets[0] if nets else _UNLOADED

    @property
    def nets(self) -> tuple[Net, ...]:
        """Every Net that serves the model: one per device still serving."""
        runner = self.runner
        return (runner,) if isinstance(runner, Net) else runner.serving_nets


#: what a group's model reads for its names before it has loaded (none)
_UNLOADED = Net()


def _stamp(files: ModelFiles) -> tuple[int, ...]:
    """What changes when either file is replaced or rewritten (0s for a file gone)."""
    out: list[int] = []
    for path in (files.param, files.bin):
        try:
            st = os.stat(path)
        except OSError:
            out += [0, 0]
        else:
            out += [st.st_mtime_ns, st.st_size]
    return tuple(out)


class Repository:
    """The models being served, by name; loads, reloads and unloads them while requests run.

    A model loads into a Net and batcher of its own; a reload builds the new ones beside the
    old, swaps them in once loaded (requests that arrive meanwhile are served by the old), then
    retires the old once every request it took has its answer. An unload takes the name away
    at once and retires the model the same way. Requests to other models never wait for any of
    it. With a folder (``--models DIR``), :meth:`poll` loads new ``NAME`` folders, reloads
    models whose files changed and unloads those whose folder went away.
    """

    def __init__(
        self,
        files: list[ModelFiles],
        *,
        option: Option,
        batching: BatchSettings,
        warm_up: Mapping[str, tuple[int, ...]] | None = None,
        folder: str | None = None,
        warm_up_batches: bool = False,
        devices: Sequence[int] | Literal["all"] | None = None,
    ) -> None:
        self.option = option
        #: with devices, each model is a NetGroup over them (None: one Net on ``option``'s)
        self.devices = devices
        self.warm_up_batches = warm_up_batches
        self.batching = batching
        self.warm_up = dict(warm_up or {})
        self.folder = folder
        self.strict_warm_up = len(files) == 1 and folder is None
        #: the pipeline cache every model shares (on the GPU; made by :meth:`open`)
        self.cache: PipelineCache | None = None
        self.models: dict[str, ServedModel] = {f.name: self._make(f) for f in files}
        #: per name being loaded or unloaded: its lock and how many hold or wait for it
        self._busy: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        self._retiring: set[asyncio.Task[None]] = set()

    def _make(self, files: ModelFiles) -> ServedModel:
        option = self.option
        if option.cache_dir is not None and not (self.strict_warm_up and option.graph_key):
            option = dataclasses.replace(option, graph_key=files.name)
        if self.cache is not None:
            option = dataclasses.replace(option, pipeline_cache=self.cache)
        if self.warm_up_batches:  # the batch plans recorded before ready stay
            option = dataclasses.replace(option, idle_batch_plans=max(option.idle_batch_plans, 1))
        if self.devices is not None:  # each member opens its own device and cache
            group = NetGroup(self.devices, dataclasses.replace(option, pipeline_cache=None))
            return ServedModel(files, group, Batcher(group, self.batching))
        net = Net(dataclasses.replace(option))
        return ServedModel(files, net, Batcher(net, self.batching))

    async def open(self) -> None:
        """Every model at once, on one device and one pipeline cache; raises the first error
        (each model keeps its own in ``error``)."""
        if self.devices is not None:
            self.cache = None  # each model's members hold their own
        elif self.option.pipeline_cache is None:
            self.cache = await asyncio.to_thread(_open_shared_cache, self.option)
        else:
            self.cache = self.option.pipeline_cache
        if self.cache is not None:
            for model in self.models.values():
                net = model.net
                net.opt = dataclasses.replace(net.opt, pipeline_cache=self.cache)
        await asyncio.gather(*(self._load_into(m) for m in self.models.values()))

    async def _load_into(self, model: ServedModel) -> None:
        runner, files = model.runner, model.files
        start = time.perf_counter()
        log.info("loading %s: %s and %s", files.name, files.param, files.bin)
        stamp = _stamp(files)
        try:
            await runner.load_param(files.param)
            await runner.load_model(files.bin)
            net = model.net
            shapes = self._warm_up_shapes(net)
            if shapes:
                t0 = time.perf_counter()
                # through the batcher, which learns what an item takes; then a group's every
                # member on its own (the batcher ran that one on whichever it chose)
                await warm_up(net, shapes, model.batcher)
                if isinstance(runner, NetGroup):
                    for member in runner.serving_nets:
                        await warm_up(member, shapes)
                if self.warm_up_batches:
                    for member in model.nets:
                        await warm_up_batches(member, shapes, model.batcher)
                model.batcher.statistics = BatchStatistics()  # the warm-up is not served
                model.warm_up_seconds = time.perf_counter() - t0
        except Exception as exc:
            model.error = f"{files.name}: {type(exc).__name__}: {exc}"
            raise
        model.stamp = stamp
        model.load_seconds = time.perf_counter() - start
        model.ready = True
        log.info("%s ready in %.2f s (%s)", files.name, model.load_seconds, cache_summary(net))

    def _warm_up_shapes(self, net: Net) -> dict[str, tuple[int, ...]]:
        """The warm-up shapes for ``net``: all of them for a lone model (a wrong name is its
        load error), else those of its own inputs."""
        if self.strict_warm_up:
            return self.warm_up
        return {n: s for n, s in self.warm_up.items() if n in net.input_names}

    async def load(self, name: str) -> ServedModel:
        """Load ``name`` (again): from the folder, or from its own files. The model serving
        now, if any, keeps serving until the new one is ready (UnknownModel for a name this
        repository cannot find; the load's own error otherwise, with the old model kept).

        Raises:
            UnknownModel: the name is neither served nor in the folder.
        """
        async with self._one_at_a_time(name):
            old = self.models.get(name)
            files = self._files_for(name, old)
            new = self._make(files)
            try:
                await self._load_into(new)
            except BaseException:
                await new.runner.aclose()
                raise
            self.models[name] = new
            if old is not None:
                self._retire(old)
            return new

    @asynccontextmanager
    async def _one_at_a_time(self, name: str) -> AsyncIterator[None]:
        """One load or unload of ``name`` at a time; the lock goes once nobody needs it."""
        lock, users = self._busy.setdefault(name, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._busy[name]

    def _files_for(self, name: str, old: ServedModel | None) -> ModelFiles:
        if self.folder is not None:
            param = os.path.join(self.folder, name, "model.param")
            weights = os.path.join(self.folder, name, "model.bin")
            if os.path.isfile(param) and os.path.isfile(weights):
                return ModelFiles(name, param, weights)
            if old is None:
                raise UnknownModel(f"no {name}/model.param with its model.bin in {self.folder}")
        if old is None:
            raise UnknownModel(f"unknown model {name!r} (models: {', '.join(self.models)})")
        return old.files

    async def unload(self, name: str) -> None:
        """Take ``name`` away now (its later requests are 404s) and retire it."""
        async with self._one_at_a_time(name):
            model = self.models.pop(name, None)
            if model is None:
                raise UnknownModel(f"unknown model {name!r} (models: {', '.join(self.models)})")
            log.info("unloading %s", name)
            self._retire(model)

    def _retire(self, model: ServedModel) -> None:
        task = asyncio.ensure_future(_retire(model))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def poll(self) -> None:
        """Bring the models in line with the folder: new ones loaded, changed ones reloaded,
        gone ones unloaded. A model that fails to load is logged and left as it was."""
        if self.folder is None:
            return
        try:
            found = {f.name: f for f in find_models(self.folder)}
        except ValueError as exc:
            log.warning("models folder: %s", exc)
            found = {}
        for name in list(self.models):
            if name not in found:
                await self.unload(name)
        for name, files in found.items():
            model = self.models.get(name)
            if model is not None and _stamp(files) == model.stamp:
                continue
            if model is not None and not model.ready:
                continue  # still loading: its own load will finish
            try:
                await self.load(name)
            except Exception as exc:
                log.error("%s did not load: %s", name, exc)

    async def close(self) -> None:
        """Retire every model (each after its queued requests), then the shared cache."""
        for model in list(self.models.values()):
            self._retire(model)
        self.models.clear()
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
        if self.cache is not None and self.option.pipeline_cache is None:
            await self.cache.aclose()


async def _retire(model: ServedModel) -> None:
    """A model no longer reachable: answer what it took, then close its Net."""
    model.ready = False
    await model.batcher.drain()
    await model.runner.aclose()  # flushes its cache folder's save first
    for net in model.nets:
        saved = (net.cache_status or {}).get("saved")
        if saved:
            log.info("pipeline cache of %s saved to %s", model.name, saved)


def _open_shared_cache(option: Option) -> PipelineCache | None:
    """The models' one pipeline cache, on the device they share (None on the CPU path)."""
    from ..gpu import get_gpu_count, get_gpu_device

    if option.use_vulkan_compute is False or get_gpu_count() == 0:
        return None
    device = get_gpu_device(option.vulkan_device)
    return PipelineCache(device, max_workers=option.num_compile_threads)


def cache_summary(net: Net) -> str:
    """How the load went for the pipeline cache, in words for the console."""
    status = net.cache_status
    if status is None:
        return "no pipeline cache folder"
    if status.get("loaded"):
        return f"pipeline cache warm: {status.get('entries_used', 0)} SPIR-V entries used"
    return f"pipeline cache cold: {status.get('reason', 'not loaded')}"
