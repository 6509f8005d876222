"""Net: ncnn's API with the slow parts awaitable.

``load_model`` asks the PipelineCache for every pipeline of every GPU layer at once and uploads
weights while they build, so a cold start costs the slowest pipeline rather than the sum.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

import anyio
import numpy as np

from .._errors import ModelFormatError
from ..cache._autosave import AutoSaver
from ..cache._persist import SaveResult, merge_with_saved
from ..cache._pipeline_cache import await_shared
from ..cache._safe_fs import expand_path
from ..cache._spec import PipelineSpec
from ..gpu._memory import Buffer
from ..gpu._pipeline import PipelineArtifact
from ..layers._base import Layer
from ..layers._gpu_api import GpuTarget
from ..layers._gpu_layer import GpuLayer, bind_gpu
from ..layers._registry import layer_class, layer_types
from ..shader._options import ShaderOptions
from ._modelbin import ModelBinReader
from ._option import Option
from ._param_parser import SHAPE_HINTS_ID, ParamFile, model_error, parse_param
from ._plan import Plan, needed_nodes, run_cpu_layer

Progress = Callable[[int, int], None]
_FEATMASK_NO_VULKAN = 1 << 4


def _import_layers() -> None:
    from ..layers import _all  # noqa: F401  (registers every layer type)


@dataclass(eq=False)
class _Node:
    index: int
    layer: Layer
    bottoms: list[int]
    tops: list[int]
    line: int
    params: Any = None
    vulkan: GpuLayer | None = None
    pipelines: dict[str, PipelineArtifact] = field(default_factory=dict)
    #: Shape-baked pipelines by (pipeline key, push bytes): see ``_shape_hints``.
    baked: dict[tuple[str, bytes], PipelineArtifact] = field(default_factory=dict)
    weight_buffers: dict[str, Buffer] = field(default_factory=dict)


@dataclass(frozen=True)
class LoadStatistics:
    load_param_s: float = 0.0
    load_model_s: float = 0.0
    read_weights_s: float = 0.0
    pipelines_s: float = 0.0
    upload_s: float = 0.0
    pipelines_requested: int = 0
    shape_baked_pipelines: int = 0
    gpu_layers: int = 0
    cpu_layers: int = 0


class Net:
    """An ncnn network: ``load_param``, ``load_model``, then extractors.

    Loading again (``load_param`` and ``load_model``, or ``load_model`` alone) replaces the
    model: extractions still running finish on the old one, then everything it held on the
    device (weights, plans with their command buffers, descriptor pools and blob arenas) is
    released before the new model is read. Pipelines belong to the PipelineCache and stay.
    Extractors made before the reload are refused (see :class:`Extractor`).
    """

    def __init__(self, opt: Option | None = None) -> None:
        self.opt = opt or Option()
        self.nodes: list[_Node] = []
        self.blob_names: list[str] = []
        self.blob_index: dict[str, int] = {}
        self.producer: dict[int, int] = {}
        self.param: ParamFile | None = None
        self.loaded = False
        self.device: Any = None
        self.cache: Any = None
        self._owns_cache = False
        #: Pipelines this model's plans record with, held so the cache dropping them is safe.
        self._held_pipelines: list[PipelineArtifact] = []
        self.storage_fp16 = False
        self.use_vulkan = False
        self.commands_recorded = 0
        #: What the managed cache folder did at load ({"loaded": bool, "reason": str, ...}).
        self.cache_status: dict[str, Any] | None = None
        self._cache_dir: Any = None
        self._fingerprint = ""
        #: Saves the cache folder after load and whenever something new is built since.
        self._autosaver: AutoSaver | None = None
        self._pending_save: asyncio.Future[SaveResult | None] | None = None
        self._param_source: Any = None
        self.load_stats = LoadStatistics()
        self._plans: dict[tuple[Any, ...], list[Plan]] = {}
        self._idle: dict[tuple[Any, ...], list[Plan]] = {}
        self._plan_cond: asyncio.Condition | None = None
        self._closed = False
        #: Bumped whenever the model changes: an Extractor of an older generation is stale.
        self._generation = 0
        self._in_flight = 0
        self._drained: asyncio.Event | None = None

    # -- loading -------------------------------------------------------------------------------

    async def load_param(self, source: str | os.PathLike[str] | bytes | IO[Any]) -> None:
        """Parse a text ``.param`` and create its layers (no weights, no GPU work yet)."""
        start = time.perf_counter()
        self._prepare_compiler()
        _import_layers()
        if isinstance(source, (str, os.PathLike)):
            source = expand_path(source)  # "~/models/x.param", as a shell would
        elif not isinstance(source, bytes):
            source = source.read()
            if isinstance(source, str):
                source = source.encode()
        self._param_source = source
        param = await anyio.to_thread.run_sync(
            lambda: parse_param(source, known_types=layer_types())
        )
        nodes: list[_Node] = []
        blob_index: dict[str, int] = {name: i for i, name in enumerate(param.blob_names)}
        producer: dict[int, int] = {}
        for i, decl in enumerate(param.layers):
            cls = layer_class(decl.type)
            if cls is None:  # the parser checks too; this keeps the invariant local
                raise ModelFormatError(
                    f"unknown layer type {decl.type!r}",
                    file=param.source,
                    line=decl.line,
                    layer=decl.name,
                )
            layer = cls()
            layer.name = decl.name
            layer.bottoms = list(decl.bottoms)
            layer.tops = list(decl.tops)
            try:
                layer.featmask = decl.params.get_int(31, 0) if 31 in decl.params else 0
                layer.load_param(decl.params)
                layer.check_blob_counts(len(decl.bottoms), len(decl.tops))
            except ModelFormatError:
                raise
            except Exception as exc:  # whatever a layer raises, the user is told where
                raise model_error(exc, file=param.source, line=decl.line, layer=decl.name) from exc
            node = _Node(
                i,
                layer,
                [blob_index[b] for b in decl.bottoms],
                [blob_index[t] for t in decl.tops],
                decl.line,
                params=decl.params,
            )
            for t in node.tops:
                producer[t] = i
            nodes.append(node)
        await self._retire_model()
        self.param = param
        self.nodes = nodes
        self.blob_names = list(param.blob_names)
        self.blob_index = blob_index
        self.producer = producer
        self.loaded = False
        self.load_stats = LoadStatistics(load_param_s=time.perf_counter() - start)

    async def load_model(
        self,
        source: str | os.PathLike[str] | bytes | IO[Any],
        *,
        progress: Progress | None = None,
    ) -> None:
        """Read weights, then build every pipeline concurrently while weights upload."""
        if self.param is None:
            raise ModelFormatError("load_param must be called before load_model")
        await self._retire_model()  # reading weights changes the layers the old model runs
        start = time.perf_counter()
        if isinstance(source, (str, os.PathLike)):
            source = expand_path(source)
        elif not isinstance(source, bytes):
            source = source.read()
        reader = await anyio.to_thread.run_sync(ModelBinReader.open, source)
        await anyio.to_thread.run_sync(self._read_weights, reader)
        read_s = time.perf_counter() - start
        # opening the device (100-200 ms on a discrete GPU's driver) must not block the loop
        await anyio.to_thread.run_sync(self._setup_device)
        total = len(self.nodes)
        done = 0
        pipelines_s = upload_s = 0.0
        baked: list[tuple[_Node, Any, Any]] = []
        requested = 0
        if self.use_vulkan:
            await self._load_from_cache_dir(source)
            self._create_vulkan_layers()
            gpu_nodes = [n for n in self.nodes if n.vulkan is not None]
            options = self.opt.shader_options()
            wanted: list[tuple[_Node, Any, PipelineSpec]] = []
            for node in gpu_nodes:
                assert node.vulkan is not None
                for key, spec in node.vulkan.pipeline_specs().items():
                    wanted.append((node, key, dataclasses.replace(spec, options=options)))
            if self.opt.use_shape_hints:
                baked = self._shape_baked_specs(gpu_nodes, options)
            wanted += baked
            started = self.cache.request_many(spec for _, _, spec in wanted)
            futures = [(node, key, started[spec]) for node, key, spec in wanted]
            requested = len(futures)
            t0 = time.perf_counter()
            upload = asyncio.ensure_future(
                anyio.to_thread.run_sync(self._upload_weights, gpu_nodes)
            )
            try:
                pending_per_node: dict[int, int] = {}
                for node, _key, _fut in futures:
                    pending_per_node[node.index] = pending_per_node.get(node.index, 0) + 1
                done = total - len(pending_per_node)
                if progress:
                    progress(done, total)
                built: dict[Any, PipelineArtifact] = {}
                for node, key, fut in futures:
                    artifact = built.get(fut)
                    if artifact is None:
                        artifact = built[fut] = await await_shared(fut)
                        self._held_pipelines.append(artifact.acquire())  # cache.clear() safe
                    if isinstance(key, tuple):
                        node.baked[key] = artifact
                    else:
                        node.pipelines[key] = artifact
                    pending_per_node[node.index] -= 1
                    if pending_per_node[node.index] == 0:
                        done += 1
                        if progress:
                            progress(done, total)
                pipelines_s = time.perf_counter() - t0
                await upload
                upload_s = time.perf_counter() - t0
            except BaseException:
                # the builds still running go on, owned by the cache; nobody awaits them
                if not upload.done():
                    upload.cancel()
                with anyio.CancelScope(shield=True):
                    try:
                        await upload
                    except BaseException:
                        pass
                self._release_gpu_state()
                raise
        elif progress:
            progress(total, total)
        if self._cache_dir is not None and self.use_vulkan:
            saver = self._autosaver
            if saver is None or saver.cache is not self.cache or saver.loop.is_closed():
                if saver is not None:
                    saver.cancel()
                saver = self._autosaver = AutoSaver(
                    self.cache, save=self._save_to_cache_dir, interval=self.opt.autosave_interval
                )
            saver.mark_dirty()  # this model's file, even if nothing was built
            self._pending_save = asyncio.ensure_future(saver.save_now())
        gpu = sum(1 for n in self.nodes if n.vulkan is not None)
        self.load_stats = LoadStatistics(
            load_param_s=self.load_stats.load_param_s,
            load_model_s=time.perf_counter() - start,
            read_weights_s=read_s,
            pipelines_s=pipelines_s,
            upload_s=upload_s,
            pipelines_requested=requested,
            shape_baked_pipelines=len(baked) if self.use_vulkan else 0,
            gpu_layers=gpu,
            cpu_layers=total - gpu,
        )
        self.loaded = True

    async def _load_from_cache_dir(self, model_source: Any) -> None:
        """With ``cache_dir`` and ``graph_key`` set, load this key's file for this device."""
        opt = self.opt
        self._cache_dir = None
        if not (opt.cache_dir and opt.graph_key):
            return
        from ..cache._directory import CacheDirectory, model_fingerprint

        directory = CacheDirectory(opt.cache_dir, read_only=self.cache.read_only)
        self._cache_dir = directory
        self._fingerprint = await anyio.to_thread.run_sync(
            model_fingerprint, self._param_source, model_source
        )
        identity = self.device.info.identity
        found = await anyio.to_thread.run_sync(
            directory.lookup, opt.graph_key, identity, self._fingerprint
        )
        status: dict[str, Any] = {
            "loaded": False,
            "reason": found.reason,
            "stale_removed": found.stale_removed,
        }
        if found.data is not None:
            result = await anyio.to_thread.run_sync(self.cache.load_cache, found.data)
            status.update(
                loaded=bool(result),
                reason=result.reason,
                file=str(found.path),
                entries_used=result.entries_used,
            )
        if not directory.writable:
            self._cache_dir = None  # read-only folder or cache: it served, nothing is saved
        self.cache_status = status

    async def _save_to_cache_dir(self) -> SaveResult:
        directory = self._cache_dir
        if directory is None or not self.opt.graph_key:
            return SaveResult(False, "no writable cache folder")
        cache = self.cache

        def build(current: bytes | None) -> bytes:
            return merge_with_saved(cache, current)  # keeps what another process saved

        path = await anyio.to_thread.run_sync(
            directory.store,
            self.opt.graph_key,
            self.device.info.identity,
            self._fingerprint,
            build,
        )
        if path is None:
            return SaveResult(False, f"not saved to {directory.path}")
        if self.cache_status is not None:
            self.cache_status["saved"] = str(path)
        return SaveResult(True, "saved", str(path))

    async def flush_cache(self) -> None:
        """Wait for the background save of the cache folder (and save anything newer)."""
        if self._pending_save is not None:
            await self._pending_save
            self._pending_save = None
        if self._autosaver is not None and self.cache is not None and not self.cache.closed:
            await self._autosaver.save_now()

    def _read_weights(self, reader: ModelBinReader) -> None:
        assert self.param is not None
        for node in self.nodes:
            reader.current_layer = node.layer.name
            try:
                node.layer.load_model(reader)
            except ModelFormatError:
                raise
            except Exception as exc:
                raise model_error(
                    exc, file=reader.source, line=node.line, layer=node.layer.name
                ) from exc
        reader.current_layer = None
        reader.check_end()

    def _prepare_compiler(self) -> None:
        """Warm the GLSL compiler in the background, unless this load cannot need it."""
        if self.opt.use_vulkan_compute is False:
            return
        cache = self.opt.pipeline_cache
        if cache is not None and cache.statistics().spirv_entries:
            return  # warm from a cache file: nothing to compile, most likely
        from ..shader._compiler import prepare_compiler

        prepare_compiler()

    def _setup_device(self) -> None:
        from ..gpu._device import get_gpu_device
        from ..gpu._instance import get_gpu_count

        use = self.opt.use_vulkan_compute
        if use is None:
            use = get_gpu_count() > 0
        self.use_vulkan = bool(use)
        if not self.use_vulkan:
            return
        if self.opt.pipeline_cache is not None:
            self.cache = self.opt.pipeline_cache
            self.device = self.cache.device
            self._owns_cache = False
        elif self.cache is None or self.cache.closed:
            from ..cache._pipeline_cache import PipelineCache

            self.device = get_gpu_device(self.opt.vulkan_device)
            self.cache = PipelineCache(self.device, max_workers=self.opt.num_compile_threads)
            self._owns_cache = True
        info = self.device.info
        self.storage_fp16 = self.opt.use_fp16_storage and info.support_fp16_storage

    def _create_vulkan_layers(self) -> None:
        info = self.device.info
        target = GpuTarget(self.opt.shader_options().supported_on(info), info)
        for node in self.nodes:
            node.vulkan = None
            node.pipelines = {}
            node.baked = {}
            if node.layer.featmask & _FEATMASK_NO_VULKAN:
                continue
            try:
                node.vulkan = bind_gpu(node.layer, target)
                if node.vulkan is not None:
                    node.vulkan.pipeline_specs()
            except Exception as exc:  # a GPU layer reads the params too: same rule
                raise self._layer_error(node, exc) from exc

    def _layer_error(self, node: _Node, exc: Exception) -> ModelFormatError:
        assert self.param is not None
        return model_error(exc, file=self.param.source, line=node.line, layer=node.layer.name)

    def _hinted_shapes(self) -> dict[int, tuple[int, ...]]:
        """Blob shapes the param file hints: id 30 on any layer, or an Input's own params."""
        from ._shape_hints import decode_hints

        shapes: dict[int, tuple[int, ...]] = {}
        for node in self.nodes:
            params = node.params
            tops: list[tuple[int, ...] | None] = [None] * len(node.tops)
            if params is not None and SHAPE_HINTS_ID in params:
                tops = decode_hints(params[SHAPE_HINTS_ID], len(node.tops))
            if node.layer.type_name == "Input" and tops == [None] and not node.bottoms:
                try:
                    tops = [tuple(node.layer.output_shapes([])[0])]
                except ValueError:
                    pass
            for t, shape in zip(node.tops, tops, strict=True):
                if shape is not None:
                    shapes[t] = shape
        return shapes

    def _shape_baked_specs(
        self, nodes: list[_Node], options: ShaderOptions
    ) -> list[tuple[_Node, Any, PipelineSpec]]:
        """A ``@shapes`` pipeline spec for each dispatch a hinted GPU layer would record."""
        from ._shape_hints import capture_dispatches

        shapes = self._hinted_shapes()
        registry = self.cache.registry
        futures: list[tuple[_Node, Any, PipelineSpec]] = []
        for node in nodes:
            vl = node.vulkan
            assert vl is not None
            if not all(b in shapes for b in node.bottoms + node.tops):
                continue
            specs = vl.pipeline_specs()
            requests = capture_dispatches(
                vl,
                self.device.info,
                [shapes[b] for b in node.bottoms],
                [shapes[t] for t in node.tops],
            )
            for key, push in requests:
                spec = specs.get(key)
                variant = registry.shape_variant(spec.shader) if spec is not None else None
                if spec is None or variant is None:
                    continue
                baked = dataclasses.replace(spec, shader=variant, options=options, baked_push=push)
                futures.append((node, (key, push), baked))
        return futures

    def _upload_weights(self, nodes: list[_Node]) -> None:
        dtype = np.float16 if self.storage_fp16 else np.float32
        for node in nodes:
            assert node.vulkan is not None
            try:
                weights = node.vulkan.weights()
            except Exception as exc:
                raise self._layer_error(node, exc) from exc
            for name, array in weights.items():
                node.weight_buffers[name] = self.device.upload_sync(
                    np.ascontiguousarray(array, dtype=dtype)
                )

    # -- execution -------------------------------------------------------------------------------

    def create_extractor(self) -> Extractor:
        if not self.loaded:
            raise RuntimeError("load_model must finish before create_extractor")
        return Extractor(self)

    async def _retire_model(self) -> None:
        """Stop serving the current model: wait for its extractions, then free its device state."""
        self._generation += 1
        self.loaded = False
        while self._in_flight:
            self._drained = asyncio.Event()
            await self._drained.wait()
        self._release_gpu_state()

    def _extraction_done(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0 and self._drained is not None:
            self._drained.set()

    def _plan_key(self, shapes: dict[int, tuple[int, ...]], target: int) -> tuple[Any, ...]:
        return (target, tuple(sorted(shapes.items())))

    async def _acquire_plan(self, shapes: dict[int, tuple[int, ...]], target: int) -> Plan:
        if self._plan_cond is None:
            self._plan_cond = asyncio.Condition()
        key = self._plan_key(shapes, target)
        async with self._plan_cond:
            while True:
                idle = self._idle.setdefault(key, [])
                if idle:
                    return idle.pop()
                plans = self._plans.setdefault(key, [])
                if len(plans) < self.opt.max_plans_per_shape:
                    break
                await self._plan_cond.wait()
            self._evict_other_shapes(key)
        plan = await anyio.to_thread.run_sync(lambda: Plan(self, shapes, target))
        self._plans.setdefault(key, []).append(plan)
        return plan

    def _evict_other_shapes(self, keep: tuple[Any, ...], max_shapes: int = 8) -> None:
        """Keep plans for at most ``max_shapes`` shapes: drop idle plans of the oldest."""
        while len(self._plans) >= max_shapes:
            for key in list(self._plans):
                if key != keep and len(self._idle.get(key, [])) == len(self._plans[key]):
                    for plan in self._plans.pop(key):
                        plan.release()
                    self._idle.pop(key, None)
                    break
            else:
                return

    async def _release_plan(
        self, plan: Plan, shapes: dict[int, tuple[int, ...]], target: int
    ) -> None:
        assert self._plan_cond is not None
        key = self._plan_key(shapes, target)
        async with self._plan_cond:
            if plan in self._plans.get(key, []):
                self._idle.setdefault(key, []).append(plan)
            else:
                plan.release()
            self._plan_cond.notify()

    async def _run_cpu(self, inputs: dict[int, np.ndarray], target: int) -> np.ndarray:
        def run() -> np.ndarray:
            host = dict(inputs)
            for node in needed_nodes(self, set(host), target):
                outs = run_cpu_layer(node, [host[b] for b in node.bottoms])
                for t, value in zip(node.tops, outs, strict=True):
                    host[t] = value
            return np.asarray(host[target], dtype=np.float32)

        return await anyio.to_thread.run_sync(run)

    # -- lifetime ------------------------------------------------------------------------------

    def _release_gpu_state(self) -> None:
        for plans in self._plans.values():
            for plan in plans:
                plan.release()
        self._plans.clear()
        self._idle.clear()
        for node in self.nodes:
            for buf in node.weight_buffers.values():
                buf.release()
            node.weight_buffers = {}
            node.pipelines = {}
            node.baked = {}
        held, self._held_pipelines = self._held_pipelines, []
        for artifact in held:
            artifact.release()
        self.loaded = False

    def close(self) -> None:
        """Release plans, weights and (when owned) the pipeline cache. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._generation += 1
        if self._autosaver is not None:
            self._autosaver.cancel()  # aclose() flushed it; a bare close() saves nothing more
        self._release_gpu_state()
        if self._owns_cache and self.cache is not None:
            self.cache.close()
        self.cache = None

    async def aclose(self) -> None:
        """Flush the cache folder's background save, then :meth:`close`."""
        if not self._closed:
            try:
                await self.flush_cache()
                if self._autosaver is not None:
                    await self._autosaver.aclose()
            except Exception:  # a cache save never fails the caller
                pass
        await anyio.to_thread.run_sync(self.close)

    async def __aenter__(self) -> Net:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def input_names(self) -> list[str]:
        return list(self.param.input_names) if self.param else []

    @property
    def output_names(self) -> list[str]:
        return list(self.param.output_names) if self.param else []


class Extractor:
    """One inference's inputs; ``await extract(name)`` runs what that output needs.

    An extractor belongs to the model that was loaded when it was made. Once the Net loads
    another (``load_param``/``load_model``) or closes, its ``input`` and ``extract`` raise
    RuntimeError rather than mix the two models' blobs: make a new one with
    ``net.create_extractor()``. An ``extract`` already running when the reload starts
    finishes on the old model.
    """

    def __init__(self, net: Net) -> None:
        self.net = net
        self._generation = net._generation
        self._inputs: dict[int, np.ndarray] = {}

    def _check_current(self) -> None:
        if self.net._closed:
            raise RuntimeError("this Extractor's Net was closed")
        if self._generation != self.net._generation:
            raise RuntimeError(
                "this Extractor was made before the Net loaded another model "
                "(load_param/load_model); make a new one with net.create_extractor()"
            )

    def input(self, name: str, array: np.ndarray) -> None:
        """Set an input blob: CHW (or any ncnn layout), or NCHW with N == 1."""
        self._check_current()
        index = self.net.blob_index.get(name)
        if index is None:
            raise KeyError(f"no blob named {name!r} (inputs: {self.net.input_names})")
        kind = np.asarray(array).dtype.kind
        if kind not in "fiu":  # real numbers become float32; bool, complex, text do not
            raise ValueError(
                f"input {name!r}: dtype {np.asarray(array).dtype} is not a real number type"
            )
        data = np.asarray(array, dtype=np.float32)
        if data.ndim == 4 and data.shape[0] == 1:
            data = data[0]
        if data.ndim not in (1, 2, 3, 4):
            raise ValueError(f"input {name!r} must have 1 to 4 dims, got shape {data.shape}")
        self._inputs[index] = np.ascontiguousarray(data)

    async def extract(self, name: str) -> np.ndarray:
        net = self.net
        self._check_current()
        target = net.blob_index.get(name)
        if target is None:
            raise KeyError(f"no blob named {name!r} (outputs: {net.output_names})")
        net._in_flight += 1  # a reload waits for this extraction before freeing its model
        try:
            if not net.use_vulkan:
                return await net._run_cpu(self._inputs, target)
            shapes = {b: tuple(a.shape) for b, a in self._inputs.items()}
            plan = await net._acquire_plan(shapes, target)
            try:
                return await plan.run(self._inputs)
            finally:
                await net._release_plan(plan, shapes, target)
        finally:
            net._extraction_done()
