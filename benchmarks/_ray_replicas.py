"""``ray_serve_throughput.py --replicas``: N replicas against one, and a later replica warm from
Redis. Each function runs in a fresh process with a Ray instance of its own.

``replicas_run``: ``replicas`` replicas of one model, ``num_gpus`` each, behind Serve's HTTP
proxy; the clients are ``server_throughput.py``'s, spread over ``client_processes`` processes
so that the client is not what is measured, every answer checked. A first round of
``warm_up_s`` is not counted (it builds the plans of the batch sizes that load brings).

``warm_replica_run``: a redis-server, one replica that answers, pushes what it compiled
(``flush_cache``) and reports, then the app scaled to two: the statistics of each replica that
started after the push (``spirv_compiles`` 0 when every SPIR-V came from Redis).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import threading
import time
import urllib.request
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
from _common import free_port
from remote_cache import _start_redis
from server_throughput import _clients, _close, _request

#: seconds to wait for a state reached in a few on an idle machine
PATIENCE = 300.0
#: the cache counters that say where a replica's shaders and pipelines came from
CACHE_KEYS = (
    "spirv_compiles", "spirv_hits", "pipelines_created", "glsl_seconds", "driver_cache_hits",
    "driver_cache_misses",
)  # fmt: skip
REMOTE_KEYS = ("hits", "misses", "pushed", "rejected")


def _ray_start(num_gpus: float, env: dict[str, str] | None = None) -> tuple[str, int]:
    """A local Ray instance and Serve's proxy on a free loopback port: (its folder, the port)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import ray
        from ray import serve
    gpus = 0
    if num_gpus > 0:  # Vulkan's discrete devices, as the replicas will pick theirs
        from asyncvk.gpu import get_gpu_count, get_gpu_info

        gpus = sum(get_gpu_info(i).type_name == "discrete" for i in range(get_gpu_count()))
    folder = tempfile.mkdtemp(prefix="ray-")  # short: Ray's socket paths are bounded
    ray.init(
        num_cpus=max(8, (os.cpu_count() or 8) // 2),
        num_gpus=gpus,
        object_store_memory=1 << 30,  # what the replicas pass is small; the default is 30% of RAM
        include_dashboard=False,
        _temp_dir=folder,
        runtime_env={"env_vars": env} if env else None,
        log_to_driver=False,
    )
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    return folder, port


def _ray_stop(folder: str) -> None:
    import ray
    from ray import serve

    serve.shutdown()
    ray.shutdown()
    shutil.rmtree(folder, ignore_errors=True)


def _app(spec: dict[str, Any], replicas: int, remote_cache: str | None = None) -> Any:
    from asyncvk.serve.ray_serve import asyncvk_deployment

    folder = Path(spec["folder"])
    return asyncvk_deployment(
        str(folder / "model.param"),
        str(folder / "model.bin"),
        name=spec["model"],
        num_replicas=replicas,
        num_gpus=spec["num_gpus"],
        remote_cache=remote_cache,
    )


def _by_replica(handle: Any, asks: int) -> dict[str, dict[str, Any]]:
    """Each replica's statistics by its tag (a handle call goes to any replica)."""
    seen: dict[str, dict[str, Any]] = {}
    for _ in range(asks):
        stats = handle.statistics.remote().result()
        seen[stats["replica"]] = stats
    return seen


def _gpu_load(seconds: float, looks: int) -> list[list[float]]:
    """``nvidia-smi``'s utilization of each GPU, ``looks`` times over ``seconds`` (none
    without it)."""
    if shutil.which("nvidia-smi") is None:
        return []
    query = ["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"]
    rows = []
    for _ in range(looks):
        time.sleep(seconds / (looks + 1))
        out = subprocess.run(query, capture_output=True, text=True, timeout=30).stdout
        rows.append([float(x) for x in out.split()])
    return rows


def replicas_run(spec: dict[str, Any]) -> dict[str, Any]:
    """One run, in this (fresh) process: ``spec["replicas"]`` replicas, the clients, each
    replica's share of the answers and batches."""
    from ray import serve

    folder, port = _ray_start(spec["num_gpus"])
    try:
        handle = serve.run(_app(spec, spec["replicas"]), name=spec["model"], route_prefix="/")
        clients = dict(spec, port=port, first=0, protocol="http")
        _clients(dict(clients, seconds=spec["warm_up_s"]), spec["client_processes"])
        loads: list[list[float]] = []
        sampler = threading.Thread(
            target=lambda: loads.extend(_gpu_load(spec["seconds"] + 1.0, 4)), daemon=True
        )
        sampler.start()  # the clients wait 1 s (server_throughput's warm-up), then measure
        report = _clients(clients, spec["client_processes"])
        sampler.join()
        seen = _by_replica(handle, 16 * spec["replicas"])
        report["replicas_seen"] = len(seen)
        report["by_replica"] = {
            tag: {k: s[k] for k in ("answers", "batches", "items")} for tag, s in seen.items()
        }
        batches = sum(s["batches"] for s in seen.values())
        report["mean_batch"] = round(sum(s["items"] for s in seen.values()) / max(batches, 1), 2)
        if loads:
            report["gpu_utilization"] = [
                round(sum(c) / len(c), 1) for c in zip(*loads, strict=True)
            ]
    finally:
        _ray_stop(folder)
    return report


def _answer(port: int, spec: dict[str, Any], i: int) -> None:
    """One infer through the proxy, its answer checked against the CPU path's."""
    x = np.load(spec["inputs"][i])
    body, length = _request(spec["model"], spec["input"], spec["output"], x)
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v2/models/{spec['model']}/infer",
        data=body,
        headers={"Inference-Header-Content-Length": length},
    )
    with urllib.request.urlopen(request, timeout=60) as r:
        data = r.read()
        split = int(r.headers.get("Inference-Header-Content-Length", len(data)))
    want = np.load(spec["outputs"][i])
    got = np.frombuffer(data[split:], "<f4").reshape(want.shape)
    if not _close(got, want):
        raise AssertionError(f"a wrong answer to input {i}")


def _counters(stats: dict[str, Any]) -> dict[str, Any]:
    remote = stats["remote"] or {}
    out = {"replica": stats["replica"], "answers": stats["answers"]}
    out.update({k: stats["cache"][k] for k in CACHE_KEYS})
    out.update({f"redis_{k}": remote.get(k) for k in REMOTE_KEYS})
    return out


def warm_replica_run(spec: dict[str, Any]) -> dict[str, Any]:
    """One replica fills Redis; the app scaled to two; each later replica's counters."""
    from ray import serve

    work = Path(tempfile.mkdtemp(prefix="redis-"))
    redis_proc, redis_port = _start_redis(spec["redis_server"], work, spec["redis_lib"])
    url = f"redis://127.0.0.1:{redis_port}/0"
    # every shader compiled at its first use, so a compile is counted; one signing key, so
    # driver blobs are shared too
    env = {"ASYNCVK_PACKAGED_SPIRV": "0", "ASYNCVK_REMOTE_CACHE_KEY": secrets.token_hex(16)}
    folder, port = _ray_start(spec["num_gpus"], env)
    try:
        name = spec["model"]
        handle = serve.run(_app(spec, 1, url), name=name, route_prefix="/")
        _answer(port, spec, 0)
        handle.flush_cache.remote().result()  # its push to Redis is done
        first = _counters(handle.statistics.remote().result())
        started = time.perf_counter()
        handle = serve.run(_app(spec, 2, url), name=name, route_prefix="/")
        running_s = time.perf_counter() - started
        later: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + PATIENCE
        with ThreadPoolExecutor(8) as pool:
            while len(later) < 2 and time.monotonic() < deadline:
                list(pool.map(lambda i: _answer(port, spec, i), range(8)))
                seen = _by_replica(handle, 16)
                later = {t: s for t, s in seen.items() if t != first["replica"] and s["answers"]}
                if first["replica"] in seen and later:
                    break  # Serve kept the first replica and added one
        rows = [_counters(s) for s in later.values()]
    finally:
        _ray_stop(folder)
        redis_proc.kill()
        redis_proc.wait()
        shutil.rmtree(work, ignore_errors=True)
    return {
        "first": first,
        "later": rows,
        "scale_up_running_s": round(running_s, 2),
        "goal_met": bool(rows) and all(r["spirv_compiles"] == 0 for r in rows),
    }
