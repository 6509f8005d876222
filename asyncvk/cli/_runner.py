"""The shared core of ``asyncvk run``, ``bench`` and ``cache warm``: open a Net with the cache
the user asked for, time each phase, and report in one JSON-ready dict."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..cache._pipeline_cache import PipelineCache
from ..net._input_limits import check_input_size, load_npy_file
from ..net._net import Net
from ..net._option import Option

#: What ``RunConfig.model`` says for a model run with ``--random-weights``.
RANDOM_WEIGHTS = "random weights (seed 0)"


@dataclass
class RunConfig:
    param: str
    #: the .bin, or RANDOM_WEIGHTS
    model: str
    cache_file: str | None = None
    cache_dir: str | None = None
    graph_key: str | None = None
    device: int | None = None
    cpu: bool = False
    fp16: bool = False
    #: fp16 operands with fp32 sums where a shader has them (convolutions on matrix units)
    fp16_arithmetic: bool = False
    compile_threads: int | None = None
    read_only: bool = False
    must_hit: bool = False
    shape_hints: bool = False
    #: a remote cache URL (None: ``ASYNCVK_REMOTE_CACHE``)
    remote_cache: str | None = None
    progress: Callable[[int, int], None] | None = None


@dataclass
class OpenNet:
    net: Net
    cache: PipelineCache | None
    report: dict[str, Any]
    config: RunConfig


async def open_net(config: RunConfig) -> OpenNet:
    """Load param and model, with the cache file or folder loaded first when given.

    The param file is parsed before the device is asked for: a device opening on another
    thread (``asyncvk.cli`` starts one at its first line) has that long to finish.
    """
    from ..gpu import get_gpu_count

    report: dict[str, Any] = {"param": config.param, "model": config.model}
    start = time.perf_counter()
    # The compiler's set-up (glslang's first compile, ~80 ms on a thread): the CLI's first lines
    # start it for a run that will compile. A cache file is attached only after load_param, so
    # the rule (no SPIR-V loaded: set it up) is applied then; a warm run starts none (on
    # lavapipe's 2-core machine it slowed that run's load by 25 ms).
    warm_file = config.cache_file is not None and os.path.exists(config.cache_file)  # noqa: ASYNC240
    opt = Option(
        use_vulkan_compute=False if config.cpu else None,
        vulkan_device=config.device,
        use_fp16_storage=config.fp16,
        use_fp16_arithmetic=config.fp16_arithmetic,
        use_shape_hints=config.shape_hints,
        num_compile_threads=config.compile_threads,
        remote_cache=config.remote_cache,
        prepare_compiler=not warm_file,
    )
    if not config.cache_file and config.cache_dir and config.graph_key:
        # given now, not once the device is open: load_param's compiler rule reads the folder
        opt.cache_dir, opt.graph_key = config.cache_dir, config.graph_key
    net = Net(opt)
    client_import = None if config.cpu else _remote_client_import(config)
    t0 = time.perf_counter()
    await net.load_param(config.param)
    report["load_param_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    use_gpu = not config.cpu and get_gpu_count() > 0
    opt.use_vulkan_compute = use_gpu
    if not config.cpu and not use_gpu:
        from ..gpu._instance import NO_DRIVER_FIX

        print(f"asyncvk: no Vulkan device: running on the CPU; {NO_DRIVER_FIX}", file=sys.stderr)
    cache: PipelineCache | None = None
    report["cache_loaded"] = False
    report["cache_reason"] = "no cache requested"
    if use_gpu:
        cache = _open_gpu_cache(config, opt, report, t0)
    else:
        report["device"] = {"name": "cpu (numpy)", "driver": "", "type": "cpu"}
    if warm_file:
        net.prepare_compiler()
    model: str | bytes = config.model
    if model == RANDOM_WEIGHTS:  # made before the load's clock starts: no part of a load
        from ..net._random_weights import random_weights

        t0 = time.perf_counter()
        model = random_weights(config.param)
        report["random_weights_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    await net.load_model(model, progress=config.progress)
    report["load_model_s"] = time.perf_counter() - t0
    if client_import is not None:
        await client_import  # done long since: it started before load_param
    if net.cache_status is not None:
        report["cache_loaded"] = net.cache_status.get("loaded", False)
        report["cache_reason"] = net.cache_status.get("reason", "")
    report["open_s"] = time.perf_counter() - start
    return OpenNet(net, cache, report, config)


def _remote_client_import(config: RunConfig) -> asyncio.Task[bool] | None:
    """When the run names a remote cache and has no local one yet (no cache file, an empty or
    absent folder), it will read the store: start its client's import now, beside load_param
    and the device's opening (on the H100 a warm-from-Redis load took 0.10-0.13 s against a
    local file's 0.03 s, most of it that import)."""
    from ..cache._remote_url import configured_remote_url

    url, where = configured_remote_url(config.remote_cache)
    if not url:
        return None
    from ..cache._early_setup import local_cache_empty
    from ..cache._remote_connect import start_client_import
    from ..cache._remote_store import parse_remote_url

    if not local_cache_empty(config.cache_file, config.cache_dir):
        return None
    try:
        settings = parse_remote_url(url, where=where)
    except ValueError:  # the tier reports it, naming where the URL came from
        return None
    return asyncio.ensure_future(start_client_import(settings))


def _open_gpu_cache(
    config: RunConfig, opt: Option, report: dict[str, Any], waited_since: float
) -> PipelineCache:
    """Open the device and its pipeline cache on ``opt``, loading the cache file when given;
    timings and the device's names go into ``report``."""
    from ..gpu import get_gpu_device
    from ..layers._conv_shaders import gemm_coopmat

    device = get_gpu_device(config.device)
    report["gpu_setup_s"] = time.perf_counter() - waited_since  # what this thread waited for
    info = device.info
    report["device"] = {
        "name": info.device_name,
        "driver": info.driver_name,
        "driver_info": info.driver_info,
        "type": info.type_name,
    }
    options = opt.shader_options().supported_on(info)
    report["precision"] = {
        "fp16_storage": options.use_fp16_storage,
        "fp16_arithmetic": options.use_fp16_arithmetic,
        "matrix_unit_convolutions": gemm_coopmat(options, info),
    }
    cache = PipelineCache(
        device,
        max_workers=config.compile_threads,
        read_only=config.read_only,
        must_hit=config.must_hit,
    )
    opt.pipeline_cache = cache
    if config.cache_file:
        t0 = time.perf_counter()
        result = cache.load_cache(config.cache_file)
        report["cache_load_s"] = time.perf_counter() - t0
        report["cache_loaded"] = bool(result)
        report["cache_reason"] = result.reason
        report["cache_entries_used"] = result.entries_used
        report["cache_entries_skipped"] = result.entries_skipped
    return cache


def cache_counters(opened: OpenNet) -> dict[str, Any]:
    cache = opened.cache or (opened.net.cache if opened.net.use_vulkan else None)
    stats = opened.net.load_stats
    out: dict[str, Any] = {
        "pipelines_requested": stats.pipelines_requested,
        "shape_baked_pipelines": stats.shape_baked_pipelines,
        "gpu_layers": stats.gpu_layers,
        "cpu_layers": stats.cpu_layers,
        "weights_read_early": stats.weights_read_early,
    }
    if cache is not None:
        s = cache.statistics()
        out.update(
            pipelines_created=s.pipelines_created,
            spirv_compiled=s.spirv_compiles,
            spirv_packaged=s.spirv_packaged,
            spirv_cache_hits=s.spirv_hits,
            live_hits=s.live_hits,
            glsl_s=round(s.glsl_seconds, 4),
            create_pipelines_s=round(s.create_seconds, 4),
            driver_cache_hits=s.driver_cache_hits,
        )
    else:
        out.update(pipelines_created=0, spirv_compiled=0, spirv_packaged=0, spirv_cache_hits=0)
    return out


def built_nothing_new(cache: PipelineCache) -> bool:
    """True when every pipeline came from what the loaded file held: no shader compiled or
    taken from the package, no driver cache miss, nothing dropped. Saving would write the same
    file again."""
    s = cache.statistics()
    return (
        cache.driver_blob_loaded
        and s.spirv_compiles == 0
        and s.spirv_packaged == 0
        and s.driver_cache_misses == 0
        and s.driver_cache_hits == s.pipelines_created
        and s.spirv_rejected == 0
        and s.driver_cache_resets == 0
    )


async def close_net(opened: OpenNet, *, save: bool = True, release: bool = True) -> dict[str, Any]:
    """Save the cache file when one was named and something new was built, then release
    everything; with ``release=False`` (a process about to exit) the saves still finish and
    the rest is left to the OS."""
    report: dict[str, Any] = {}
    cache = opened.cache
    t0 = time.perf_counter()
    if save:
        await opened.net.background_builds()  # in the saved cache, so the next run has them
    if save and cache is not None and opened.config.cache_file and not opened.config.read_only:
        from_remote = (opened.net.remote_status or {}).get("hits", 0)
        if opened.report.get("cache_loaded") and built_nothing_new(cache) and not from_remote:
            report["cache_saved"] = False
            report["cache_save_reason"] = "nothing new since the file was loaded"
        else:
            result = await cache.save_cache_async(opened.config.cache_file)
            report["cache_saved"] = bool(result)
            report["cache_save_reason"] = result.reason
    if not release:
        await opened.net.flush_cache()  # the cache folder's save, if one is pending
    report["cache_save_s"] = time.perf_counter() - t0
    if release:
        await opened.net.aclose()  # waits for the remote tier's push first
        if cache is not None:
            await cache.aclose()
    if opened.net.remote_status is not None:
        report["remote_cache"] = opened.net.remote_status
    return report


def load_npy(spec: str) -> tuple[str, np.ndarray]:
    """``NAME=FILE.npy``, ``NAME=FILE.npz`` (the array called NAME, or the only one) or
    ``NAME=FILE.npz:KEY``: each header is checked against the bytes that hold it and against
    the limits (:mod:`asyncvk.net._input_limits`) before the array is allocated. Real numbers of
    any width are converted to float32 by the extractor; other dtypes are refused."""
    name, _, path = spec.partition("=")
    if not name or not path:
        raise ValueError(f"--input {spec!r}: expected NAME=FILE.npy or NAME=FILE.npz[:KEY]")
    where = spec  # every message starts with what was typed: "in0=x.npy: ..."
    file, colon, key = path.rpartition(":") if ".npz:" in path else (path, "", "")
    if not os.path.isfile(file):
        what = "is a folder" if os.path.isdir(file) else "does not exist"
        raise ValueError(f"--input {spec}: {file} {what}")
    if file.endswith(".npz") or colon:
        return name, _load_npz_member(where, file, key or None, name)
    return name, load_npy_file(where, file)


def _load_npz_member(where: str, path: str, key: str | None, name: str) -> np.ndarray:
    """One array of an .npz archive, its header checked before it is read."""
    import zipfile

    from ..net._input_limits import load_npz_member

    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise ValueError(f"{where}: not a valid .npz archive ({exc})") from None
    with archive:
        members = {m.removesuffix(".npy"): m for m in archive.namelist() if m.endswith(".npy")}
        if key is None:
            key = name if name in members else next(iter(members)) if len(members) == 1 else None
        if key is None or key not in members:
            names = ", ".join(sorted(members)) or "none"
            wanted = f"no array {key!r}" if key else f"no array named {name!r} and not one array"
            raise ValueError(
                f"{where}: {wanted} in the archive (it holds: {names}); "
                f"pick one with {name}={path}:KEY"
            )
        return load_npz_member(where, archive, members[key])


def parse_shape(spec: str) -> tuple[str, tuple[int, ...]]:
    name, _, dims = spec.partition("=")
    try:
        shape = tuple(int(d) for d in dims.split(","))
    except ValueError:
        raise ValueError(f"expected NAME=C,H,W, got {spec!r}") from None
    if not name or not shape:
        raise ValueError(f"expected NAME=C,H,W, got {spec!r}")
    return name, shape


def parse_input_shape(spec: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=C,H,W`` for an input that will be allocated: refused over the limits first."""
    name, shape = parse_shape(spec)
    check_input_size(spec, shape)
    return name, shape


def memory_peaks(opened: OpenNet) -> dict[str, Any]:
    """Peak host RSS, and the device memory asyncvk reserved (its allocator keeps every block
    until the Net closes, so what it holds now is its peak); None where not known."""
    peaks: dict[str, Any] = {"peak_host_rss_bytes": None, "device_memory_reserved_bytes": None}
    try:
        import resource

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peaks["peak_host_rss_bytes"] = rss if sys.platform == "darwin" else rss * 1024
    except ImportError:  # Windows
        pass
    net = opened.net
    if net.use_vulkan and net.device is not None:
        peaks["device_memory_reserved_bytes"] = net.device.allocator.stats()["reserved_bytes"]
    return peaks
