"""Ray Serve throughput and tail latency: asyncvk's batcher against Ray Serve's ``@serve.batch``.

    python benchmarks/ray_serve_throughput.py [--model cunet] [--clients 16] [--seconds 10]
        [--runs 2] [--num-gpus 0] [--out FILE.json]
    python benchmarks/ray_serve_throughput.py --replicas 1,2 [--model rrdb,cunet]
        [--shape rrdb=3,64,64] [--clients 128] [--client-processes 8] [--num-gpus 1]
        [--redis-server PATH [--redis-lib DIR]] [--seconds 10] [--runs 3] [--out FILE.json]

Each run is a fresh process with a Ray instance of its own (``ray.init``, Serve's HTTP proxy
on a free loopback port) and one replica of the model (``asyncvk_deployment``, ``num_gpus``
per replica: 0 uses the default Vulkan device, e.g. lavapipe). After a warm-up, ``--clients``
concurrent aiohttp clients send the Open Inference Protocol's infer with binary tensors
through the proxy for ``--seconds``; each client sends one of eight input variants and checks
its answer against the CPU path's output for it (relative L2 1e-3), so a mixed-up answer fails
the run. Three variants run interleaved, ``--runs`` times each, each round starting one later:
asyncvk's batcher, Ray's ``@serve.batch`` with no wait (as asyncvk's), and Ray's with its own
default wait of 10 ms (``max_queue_delay=0.01``).

Reported per run: requests/s, p50, p99 and max latency (ms), and the replica's batches and
items (their ratio is the mean batch size); then the median of each over the runs.

``--replicas 1,2``: replicas of asyncvk's batcher against one instead, each model at each count
in a fresh process (``_ray_replicas.py``), the counts interleaved, ``--runs`` times each, each
round starting one later. ``--clients`` clients (``server_throughput.py``'s, every answer checked
against the CPU path's) spread over ``--client-processes`` processes, so that the client is not
what is measured, after a ``--warm-up`` round that is not counted. Reported per run: requests/s,
p50/p99/max, each replica's answers and batches, and each GPU's utilization from
``nvidia-smi`` (where there is one); then the medians and each count's speedup over one replica.
With ``--redis-server`` (a binary; ``--redis-lib``: its libraries' folder), the first model also
runs the warm-replica check: one replica fills Redis, the app is scaled to two, and each replica
that started after the push reports its cache counters (the goal: ``spirv_compiles`` 0).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _common import MODELS, blob_names, emit, run_child

#: speedup of two replicas over one that counts as scaling (two GPUs)
REPLICAS_GOAL = 1.8

#: label -> (batcher, max_queue_delay): Ray's own default wait (10 ms) beside no wait
VARIANTS_RUN = {
    "asyncvk": ("asyncvk", 0.0),
    "ray": ("ray", 0.0),
    "ray_wait_10ms": ("ray", 0.01),
}
VARIANTS = 8
WARM_UP_S = 2.0

CHILD = r"""
import asyncio, json, shutil, sys, tempfile, time, warnings
from pathlib import Path
import numpy as np
sys.path.insert(0, sys.argv[2])
from ray_serve_throughput import measure
print(json.dumps(asyncio.run(measure(json.loads(sys.argv[1])))))
"""

REPLICAS_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[3])
import _ray_replicas
print(json.dumps(getattr(_ray_replicas, sys.argv[1])(json.loads(sys.argv[2]))))
"""


def _summary(latencies: list[float], seconds: float, failures: int) -> dict[str, Any]:
    ms = sorted(x * 1000 for x in latencies)
    return {
        "requests_per_s": round(len(ms) / seconds, 1),
        "p50_ms": round(statistics.median(ms), 3),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 3),
        "max_ms": round(ms[-1], 3),
        "answers": len(ms),
        "failures": failures,
    }


async def _clients(spec: dict[str, Any], port: int, inputs: list[Any], outputs: list[Any]) -> Any:
    """``clients`` aiohttp clients back to back for the warm-up and ``seconds``."""
    import aiohttp
    import numpy as np

    in_name, out_name = spec["input"], spec["output"]
    bodies = []
    for x in inputs:
        raw = np.ascontiguousarray(x[np.newaxis], "<f4").tobytes()
        tensor = {"name": in_name, "shape": [1, *x.shape], "datatype": "FP32"}
        tensor["parameters"] = {"binary_data_size": len(raw)}
        wanted = [{"name": out_name, "parameters": {"binary_data": True}}]
        header = json.dumps({"inputs": [tensor], "outputs": wanted}).encode()
        bodies.append((header + raw, str(len(header))))
    url = f"http://127.0.0.1:{port}/v2/models/{spec['model']}/infer"
    latencies: list[float] = []
    failures = 0
    start = time.perf_counter()
    measure_from = start + WARM_UP_S
    end = measure_from + spec["seconds"]
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

        async def client(i: int) -> None:
            nonlocal failures
            body, length = bodies[i % VARIANTS]
            want = outputs[i % VARIANTS]
            headers = {"Inference-Header-Content-Length": length}
            while (t := time.perf_counter()) < end:
                async with http.post(url, data=body, headers=headers) as r:
                    data, status = await r.read(), r.status
                    split = int(r.headers.get("Inference-Header-Content-Length", len(data)))
                done = time.perf_counter()
                got = np.frombuffer(data[split:], "<f4") if status == 200 else None
                if got is None or got.size != want.size:
                    failures += 1
                    continue
                scale = float(np.linalg.norm(want)) or 1.0
                if float(np.linalg.norm(got.reshape(want.shape) - want)) > 1e-3 * scale:
                    raise AssertionError(f"client {i}: a wrong answer")
                if t >= measure_from and done <= end:
                    latencies.append(done - t)

        await asyncio.gather(*(client(i) for i in range(spec["clients"])))
    return _summary(latencies, spec["seconds"], failures)


async def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """One run, in this (fresh) process: a Ray instance, one replica, the clients."""
    import shutil
    import tempfile
    import warnings

    import numpy as np
    from _common import free_port

    from asyncvk import Net, Option

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import ray
        from ray import serve

        from asyncvk.serve.ray_serve import asyncvk_deployment

    folder = Path(spec["folder"])
    rng = np.random.default_rng(0)
    shape = tuple(np.load(folder / "input.npy").shape)
    inputs = [rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(VARIANTS)]
    async with Net(Option(use_vulkan_compute=False)) as cpu:
        await cpu.load_param(folder / "model.param")
        await cpu.load_model(folder / "model.bin")
        outputs = [(await cpu.run({spec["input"]: x}))[spec["output"]] for x in inputs]
    temp = tempfile.mkdtemp(prefix="ray-")
    ray.init(num_cpus=4, include_dashboard=False, _temp_dir=temp, log_to_driver=False)
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        app = asyncvk_deployment(
            str(folder / "model.param"),
            str(folder / "model.bin"),
            name=spec["model"],
            num_gpus=spec["num_gpus"],
            batcher=spec["batcher"],
            max_queue_delay=spec["max_queue_delay"],
        )
        handle = serve.run(app, name=spec["model"], route_prefix="/")
        report = await _clients(spec, port, inputs, outputs)
        stats = await handle.statistics.remote()
        report["batches"], report["items"] = stats["batches"], stats["items"]
        report["mean_batch"] = round(stats["items"] / max(stats["batches"], 1), 2)
        serve.shutdown()
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
    return report


async def _references(
    folder: Path, shape: tuple[int, ...], in_name: str, out_name: str, work: Path
) -> tuple[list[str], list[str]]:
    """The variants' inputs and the CPU path's outputs for them, saved for the clients."""
    import numpy as np

    from asyncvk import Net, Option

    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(VARIANTS)]
    paths: tuple[list[str], list[str]] = ([], [])
    async with Net(Option(use_vulkan_compute=False)) as cpu:
        await cpu.load_param(folder / "model.param")
        await cpu.load_model(folder / "model.bin")
        for i, x in enumerate(inputs):
            y = (await cpu.run({in_name: x}))[out_name]
            for kind, array, into in (("x", x, paths[0]), ("y", y, paths[1])):
                np.save(work / f"{folder.name}-{kind}{i}.npy", array)
                into.append(str(work / f"{folder.name}-{kind}{i}.npy"))
    return paths


def _shapes(given: list[str]) -> dict[str, tuple[int, ...]]:
    shapes = {}
    for text in given:
        name, _, dims = text.partition("=")
        try:
            shapes[name] = tuple(int(d) for d in dims.split(","))
        except ValueError:
            raise SystemExit(f"--shape {text!r}: expected MODEL=C,H,W") from None
    return shapes


def _medians(results: list[dict[str, Any]]) -> dict[str, float | None]:
    """The median of each figure over the runs that have it (a run with no answer in its
    window has no latencies)."""
    out: dict[str, float | None] = {}
    for key in ("requests_per_s", "p50_ms", "p99_ms", "mean_batch"):
        values = [r[key] for r in results if key in r]
        out[key] = statistics.median(values) if values else None
    return out


def _replicas_main(args: argparse.Namespace) -> None:
    """``--replicas``: each count of replicas against one, and the warm-replica check."""
    import tempfile

    import numpy as np

    from asyncvk.gpu import get_gpu_count, get_gpu_info

    counts = [int(c) for c in args.replicas.split(",")]
    shapes = _shapes(args.shape)
    here = str(Path(__file__).resolve().parent)
    work = Path(tempfile.mkdtemp(prefix="ray-replicas-"))
    specs = {}
    for model in args.model.split(","):
        folder = MODELS / model
        in_name, out_name = blob_names(folder)
        shape = shapes.get(model) or tuple(np.load(folder / "input.npy").shape)
        inputs, outputs = asyncio.run(_references(folder, shape, in_name, out_name, work))
        specs[model] = {
            "folder": str(folder), "model": model, "shape": list(shape), "input": in_name,
            "output": out_name, "inputs": inputs, "outputs": outputs, "clients": args.clients,
            "client_processes": args.client_processes, "seconds": args.seconds,
            "warm_up_s": args.warm_up, "num_gpus": args.num_gpus,
        }  # fmt: skip
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {
        m: {str(c): [] for c in counts} for m in specs
    }
    for run in range(args.runs):
        for model, spec in specs.items():
            for c in counts[run % len(counts) :] + counts[: run % len(counts)]:
                child = json.dumps(dict(spec, replicas=c))
                result = run_child(REPLICAS_CHILD, "replicas_run", child, here)
                print(f"{model} x{c}: {json.dumps(result)[:600]}", file=sys.stderr, flush=True)
                runs[model][str(c)].append(result)
    models = []
    for model, by_count in runs.items():
        median = {c: _medians(results) for c, results in by_count.items()}
        one = median[str(counts[0])]["requests_per_s"]
        speedup = {c: round(m["requests_per_s"] / one, 2) for c, m in median.items() if one}
        row = {"model": model, "shape": specs[model]["shape"], "median": median}
        row.update(speedup_over_first=speedup, runs=by_count)
        models.append(row)
    report: dict[str, Any] = {
        "what": "Ray Serve, replicas of asyncvk's batcher, OIP binary infer through the HTTP proxy",
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "devices": [get_gpu_info(i).device_name for i in range(get_gpu_count())],
        "driver": get_gpu_info().driver_info,
        "ray": _ray_version(),
        "replicas": counts,
        "num_gpus_per_replica": args.num_gpus,
        "clients": args.clients,
        "client_processes": args.client_processes,
        "seconds": args.seconds,
        "warm_up_s": args.warm_up,
        "goal": f"{counts[-1]} replicas >= {REPLICAS_GOAL}x one (two GPUs)",
        "models": models,
    }
    if args.redis_server:
        first = next(iter(specs.values()))
        warm = dict(first, redis_server=args.redis_server, redis_lib=args.redis_lib)
        try:
            report["warm_replica"] = run_child(
                REPLICAS_CHILD, "warm_replica_run", json.dumps(warm), here
            )
        except RuntimeError as exc:  # the throughput above still stands
            report["warm_replica"] = {"error": str(exc)[-3000:]}
        report["warm_replica"]["model"] = first["model"]
    emit(report, args.out)


def _ray_version() -> str:
    import ray

    return str(ray.__version__)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="cunet", help="with --replicas: a list, a,b")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--num-gpus", type=float, default=0)
    parser.add_argument("--out")
    parser.add_argument("--replicas", help="counts of replicas to compare, e.g. 1,2")
    parser.add_argument("--client-processes", type=int, default=4)
    parser.add_argument("--shape", action="append", default=[], metavar="MODEL=C,H,W")
    parser.add_argument("--warm-up", type=float, default=3.0, help="seconds not counted")
    parser.add_argument("--redis-server", help="with --replicas: the warm-replica check")
    parser.add_argument("--redis-lib", help="LD_LIBRARY_PATH for redis-server alone")
    args = parser.parse_args()
    if args.replicas:
        _replicas_main(args)
        return
    folder = MODELS / args.model
    in_name, out_name = blob_names(folder)
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label in VARIANTS_RUN}
    labels = list(VARIANTS_RUN)
    for run in range(args.runs):
        for label in labels[run % len(labels) :] + labels[: run % len(labels)]:
            batcher, delay = VARIANTS_RUN[label]
            spec = {
                "folder": str(folder),
                "model": args.model,
                "input": in_name,
                "output": out_name,
                "clients": args.clients,
                "seconds": args.seconds,
                "num_gpus": args.num_gpus,
                "batcher": batcher,
                "max_queue_delay": delay,
            }
            here = str(Path(__file__).resolve().parent)
            result = run_child(CHILD, json.dumps(spec), here)
            print(f"{label}: {result}", file=sys.stderr)
            runs[label].append(result)
    import ray

    from asyncvk import get_gpu_info

    report = {
        "what": "Ray Serve, one replica, OIP binary infer through the HTTP proxy",
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "device": get_gpu_info().device_name if args.num_gpus == 0 else f"{args.num_gpus} GPU",
        "ray": ray.__version__,
        "model": args.model,
        "clients": args.clients,
        "seconds": args.seconds,
        "runs": runs,
        "median": {
            label: {
                key: statistics.median(r[key] for r in results)
                for key in ("requests_per_s", "p50_ms", "p99_ms", "mean_batch")
            }
            for label, results in runs.items()
        },
    }
    emit(report, args.out)


if __name__ == "__main__":
    main()
