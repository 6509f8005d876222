"""Net: ncnn's API with the slow parts awaitable.

``load_param`` parses a :class:`Graph`; ``load_model`` reads its weights and builds a
:class:`GpuModel` (every pipeline requested at once, weights uploaded while they build, so a
cold start costs the slowest pipeline rather than the sum). Extractors run the current model.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable, Mapping
from typing import IO, Any

import numpy as np
from numpy.typing import ArrayLike

from .._errors import ModelFormatError
from .._threads import outlive, run_sync
from ..cache._pipeline_cache import PipelineCache
from ..gpu._device import VulkanDevice, get_gpu_device
from ..gpu._instance import get_gpu_count
from ..layers._registry import layer_types
from ._compiler_setup import prepare_compiler_for
from ._cpu_fallback import warn_cpu_fallback
from ._extractor import Extractor as Extractor
from ._gpu_model import GpuModel, Progress
from ._graph import Graph, GraphNode, build_graph, load_weights
from ._load_statistics import LoadStatistics as LoadStatistics
from ._load_statistics import load_statistics
from ._model_cache import ModelCache
from ._model_source import ModelSource, model_source
from ._modelbin import ModelBinReader
from ._option import Option
from ._param_parser import parse_param
from ._plan import Plan, PlanRequest


class Net:
    """An ncnn network: ``load_param``, ``load_model``, then extractors.

    Loading again (``load_param`` and ``load_model``, or ``load_model`` alone) replaces the
    model: extractions still running finish on the old one, then everything it held on the
    device (weights, plans with their command buffers, descriptor pools and blob arenas) is
    released before the new model is read. Pipelines belong to the PipelineCache and stay.
    Extractors made before the reload are refused (see ``Extractor``).

    Arguments:
        opt: the settings read at ``load_model`` (default: ``Option()``: the default Vulkan
            device, or numpy on the CPU where there is none).

    Example::

        async with asyncvk.Net() as net:
            await net.load_param("model.param")
            await net.load_model("model.bin")
            outputs = await net.run({"in0": image})
    """

    def __init__(self, opt: Option | None = None) -> None:
        self.opt = opt or Option()
        #: The parsed model (``load_param``), with its weights once ``load_model`` read them.
        self.graph: Graph | None = None
        #: What the current model holds on the device; None before load or without Vulkan.
        self.gpu_model: GpuModel | None = None
        self.loaded = False
        self.device: VulkanDevice | None = None
        self.cache: PipelineCache | None = None
        self._owns_cache = False
        self.use_vulkan = False
        #: The cache folder, autosave and remote tier across this Net's loads.
        self.model_cache = ModelCache(self.opt)
        self._param_source: ModelSource | None = None
        self.load_stats = LoadStatistics()
        self._closed = False
        #: Bumped whenever the model changes: an Extractor of an older generation is stale.
        self._generation = 0
        #: Commands recorded by the GpuModels this Net released.
        self._commands_before = 0

    # -- loading -------------------------------------------------------------------------------

    async def load_param(self, source: str | os.PathLike[str] | bytes | IO[Any]) -> None:
        """Parse a text ``.param`` and create its layers (no weights, no GPU work yet).

        Arguments:
            source: a path (``~`` expanded), the file's bytes, or a file object.

        Raises:
            FileNotFoundError: the path names no file (an OSError, with the path).
            ModelFormatError: the file is malformed (its message names file, line and field).
            RuntimeError: the Net is closed.

        Example::

            await net.load_param("model.param")
            print(net.input_names, net.output_names)
        """
        self._still_open()
        start = time.perf_counter()
        if self.opt.prepare_compiler:
            self.prepare_compiler()
        param_source = await model_source(source, ".param")
        param = await run_sync(lambda: parse_param(param_source, known_types=layer_types()))
        graph = build_graph(param)
        await self._retire_model()
        self._param_source = param_source
        self.graph = graph
        self.load_stats = LoadStatistics(load_param_s=time.perf_counter() - start)

    async def load_model(
        self,
        source: str | os.PathLike[str] | bytes | IO[Any],
        *,
        progress: Progress | None = None,
    ) -> None:
        """Read weights, then build every pipeline concurrently while weights upload.

        Arguments:
            source: a path (``~`` expanded), the file's bytes, or a file object.
            progress: called as ``progress(done, total)`` while pipelines are built.

        Raises:
            FileNotFoundError: the path names no file (an OSError, with the path).
            ModelFormatError: ``load_param`` was not called, or the weights do not fit the
                ``.param`` (the message names the layer and the offset).
            DeviceError: the Vulkan device failed (``NoDeviceError`` when
                ``Option(use_vulkan_compute=True)`` asks for one and there is none).
            RuntimeError: the Net is closed, or was closed during the load.

        Example::

            await net.load_param("model.param")
            await net.load_model("model.bin")
        """
        if self.graph is None:
            raise ModelFormatError("load_param must be called before load_model")
        self._still_open()
        await self._retire_model()
        await self.model_cache.before_load()
        start = time.perf_counter()
        bin_source = await model_source(source, ".bin")
        # the device opens (100-200 ms on a discrete GPU's driver) while the weights are read
        device_setup = asyncio.ensure_future(run_sync(self._setup_device))
        try:
            reader = await run_sync(ModelBinReader.open, bin_source)
            self.graph = graph = await run_sync(load_weights, self.graph, reader)
        except BaseException:
            await outlive(device_setup)  # its thread runs on: it ends first (cancelled too)
            raise
        read_s = time.perf_counter() - start
        await device_setup
        self._still_open()
        if self.cache is not None and self.use_vulkan:
            cache, model_cache = self.cache, self.model_cache
            await model_cache.open_folder(cache, self._param_source, bin_source)
            gpu_model = await GpuModel.load(
                graph, cache, self.opt, progress=progress, prefetch=model_cache.prefetch(cache)
            )
            self._still_open(gpu_model)
            self.gpu_model = gpu_model
            model_cache.after_load(cache, self.gpu_model)
        elif progress:
            progress(len(graph.nodes), len(graph.nodes))
        self.load_stats = load_statistics(
            self.load_stats.load_param_s,
            time.perf_counter() - start,
            read_s,
            reader.read_early,
            len(graph.nodes),
            self.gpu_model,
        )
        self.loaded = True

    async def background_builds(self) -> None:
        """Wait for the pipelines ``load_model`` left building in the background: faster
        alternatives (the implicit-GEMM convolution on GPUs, Winograd on CPU devices) that
        plans adopt once built. A save after this holds them, so the next process finds them
        cached."""
        if self.gpu_model is not None:
            await self.gpu_model.settled()

    def _setup_device(self) -> None:
        use = self.opt.use_vulkan_compute
        if use is None:
            use = get_gpu_count() > 0
            if not use:
                warn_cpu_fallback()
        self.use_vulkan = bool(use)
        if not self.use_vulkan:
            return
        if self.opt.pipeline_cache is not None:
            self.cache = self.opt.pipeline_cache
            self.device = self.cache.device
            self._owns_cache = False
        elif self.cache is None or self.cache.closed:
            self.device = get_gpu_device(self.opt.vulkan_device)
            self.cache = PipelineCache(self.device, max_workers=self.opt.num_compile_threads)
            self._owns_cache = True

    def prepare_compiler(self) -> None:
        """Set the GLSL compiler up on a thread now, unless this Net's load cannot need it (its
        ``Option.pipeline_cache`` holds SPIR-V, or the install compiled every shader).

        ``load_param`` does this unless ``Option.prepare_compiler`` is False: a caller that
        attaches a cache file after ``load_param`` calls it then, so a warm load sets nothing
        up."""
        prepare_compiler_for(self.opt)

    # -- the cache -----------------------------------------------------------------------------

    @property
    def cache_status(self) -> dict[str, Any] | None:
        """What the managed cache folder did at load ({"loaded": bool, "reason": str, ...})."""
        return self.model_cache.status

    @property
    def remote_status(self) -> dict[str, Any] | None:
        """The remote cache's counters and state (shared by the process), None without one."""
        return self.model_cache.remote_report()

    async def flush_cache(self) -> None:
        """Wait for the background save of the cache folder (and save anything newer), then for
        the remote tier's push: the local save never depends on the push."""
        await self.model_cache.flush(self.cache, self.gpu_model)

    # -- execution -------------------------------------------------------------------------------

    def create_extractor(self) -> Extractor:
        """A new Extractor for one inference of the loaded model (cheap: make one per request).

        Returns:
            An Extractor whose ``input`` sets blobs and whose ``await extract(name)`` runs the
            layers that output needs.

        Raises:
            RuntimeError: ``load_model`` has not finished.

        Example::

            ex = net.create_extractor()
            ex.input("in0", image)
            out = await ex.extract("out0")
        """
        if not self.loaded:
            raise RuntimeError("load_model must finish before create_extractor")
        return Extractor(self)

    async def run(
        self, inputs: Mapping[str, ArrayLike], outputs: Iterable[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Run the model once on ``inputs`` and return its outputs, all from one forward
        (onnxruntime's ``session.run(None, feed)``).

        Arguments:
            inputs: blob name -> array, one per input of the model (``input_names``). An array
                with one more leading axis than the model's blob is a batch (see
                :meth:`Extractor.input`).
            outputs: the blobs to return; None (the default) returns every output of the
                model (``output_names``: the blobs no layer consumes).

        Returns:
            Blob name -> float32 array, in the order asked for; with the batch axis first when
            the inputs have one.

        Raises:
            InputError: a name that is no blob, a missing input, or an input the model cannot
                take (its name, expected and given shapes in the message).
            RuntimeError: ``load_model`` has not finished.

        Example::

            outputs = await net.run({"in0": image})
            boxes, scores = outputs["boxes"], outputs["scores"]
        """
        ex = self.create_extractor()
        for name, array in inputs.items():
            ex.input(name, array)
        names = self.output_names if outputs is None else list(outputs)
        return await ex.extract_many(names)

    async def _retire_model(self) -> None:
        """Stop serving the current model: its extractions finish, then its device state goes."""
        self._generation += 1
        self.loaded = False
        gpu_model, self.gpu_model = self.gpu_model, None
        if gpu_model is not None:
            self._commands_before += gpu_model.commands_recorded
            await gpu_model.retire()

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        """Release plans, weights and (when owned) the pipeline cache. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._generation += 1
        self.loaded = False
        self.model_cache.cancel()  # aclose() flushed it; a bare close() saves nothing more
        gpu_model, self.gpu_model = self.gpu_model, None
        if gpu_model is not None:
            self._commands_before += gpu_model.commands_recorded
            gpu_model.release()
        self._drop_cache()

    def _drop_cache(self) -> None:
        if self._owns_cache and self.cache is not None:
            self.cache.close()
        self.cache = None

    def _still_open(self, loaded: GpuModel | None = None) -> None:
        """RuntimeError if the Net was closed (meanwhile, for a load under way: what the load
        made since, the cache its device thread opened and ``loaded``, goes too)."""
        if self._closed:
            if loaded is not None:
                loaded.release()
            self._drop_cache()
            raise RuntimeError("this Net is closed: make a new one to load a model")

    async def aclose(self) -> None:
        """Wait for the background builds, flush the cache folder's background save, then
        ``close()``: a cache saved after ``async with Net(...)`` holds every pipeline built."""
        if not self._closed:
            await self.background_builds()
            try:
                await self.flush_cache()
            except Exception:  # a cache save never fails the caller
                pass
            await self.model_cache.aclose()
        await run_sync(self.close)

    def __repr__(self) -> str:
        if self._closed:
            return "<Net [closed]>"
        if self.graph is None:
            return "<Net [no model]>"
        where = "not loaded"
        if self.loaded:
            device = self.device.info.device_name if self.device is not None else "vulkan"
            where = device if self.use_vulkan else "cpu (numpy)"
        return (
            f"<Net [{len(self.graph.nodes)} layers, inputs {', '.join(self.input_names)}, "
            f"outputs {', '.join(self.output_names)} | {where}]>"
        )

    async def __aenter__(self) -> Net:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- reading the current model -------------------------------------------------------------

    @property
    def generation(self) -> int:
        """Bumped by every (re)load and by close: what an Extractor checks it belongs to."""
        return self._generation

    @property
    def closed(self) -> bool:
        """Whether ``aclose`` has run: a closed Net loads and runs nothing more."""
        return self._closed

    @property
    def input_names(self) -> list[str]:
        """The blobs an Extractor must be given (the model's Input layers), in file order."""
        return list(self.graph.input_names) if self.graph else []

    @property
    def output_names(self) -> list[str]:
        """The blobs no layer consumes: the model's outputs, in file order."""
        return list(self.graph.output_names) if self.graph else []

    @property
    def nodes(self) -> tuple[GraphNode, ...]:
        """The parsed layers, in execution order (empty before ``load_param``)."""
        return self.graph.nodes if self.graph else ()

    @property
    def blob_names(self) -> tuple[str, ...]:
        """Every blob's name, by blob index."""
        return self.graph.blob_names if self.graph else ()

    @property
    def blob_index(self) -> Mapping[str, int]:
        """Blob name to blob index."""
        return self.graph.blob_index if self.graph else {}

    @property
    def commands_recorded(self) -> int:
        """Command buffers recorded by this Net's plans, over every model it loaded."""
        current = self.gpu_model.commands_recorded if self.gpu_model else 0
        return self._commands_before + current

    @property
    def _plans(self) -> dict[PlanRequest, list[Plan]]:
        """The current model's plans by request, for tests and benchmarks."""
        return self.gpu_model.plans.plans if self.gpu_model else {}
