"""Server throughput and tail latency against in-process runs, every answer checked.

    python benchmarks/server_throughput.py [--models squeezenet,mobilenetv2,rrdb]
        [--shape rrdb=3,64,64 ...] [--clients 1,4,16,64] [--seconds 5] [--client-processes 4]
        [--protocols http,grpc] [--out FILE.json] [-- SERVE ARGS]

For each model, first in this process: the same concurrency with no HTTP, through plain
``net.run`` calls (each its own forward) and through the server's own dynamic batcher. Then
``asyncvk serve`` in a fresh process on 127.0.0.1 (arguments after ``--`` go to it), and for each
concurrency C, C clients speaking the Open Inference Protocol with binary tensors (the
``Inference-Header-Content-Length`` extension) over HTTP, then the same over gRPC (raw tensor
contents; the server runs with ``--grpc-port``), spread over up to ``--client-processes``
processes so that the client is not what is measured. Each client sends one of several input
variants and checks its answer against the in-process output of that variant (relative L2
1e-3), so a wrong or mixed-up answer fails the run; every status but 200 is counted.

Reported per model and concurrency: requests/s, p50, p99 and max latency (ms) for each of the
four, and the server's batches (their count and sizes, from ``/metrics``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import MODELS, ROOT, blob_names, child_env, emit, free_port

VARIANTS = 8
WARM_UP_S = 1.0


def _summary(latencies: list[float], seconds: float, failures: int = 0) -> dict[str, Any]:
    ms = sorted(x * 1000 for x in latencies)
    if not ms:
        return {"requests_per_s": 0.0, "answers": 0, "failures": failures}
    return {
        "requests_per_s": round(len(ms) / seconds, 1),
        "p50_ms": round(statistics.median(ms), 3),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 3),
        "max_ms": round(ms[-1], 3),
        "answers": len(ms),
        "failures": failures,
    }


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    if got.shape != want.shape:
        return False
    scale = float(np.linalg.norm(want)) or 1.0
    return float(np.linalg.norm(got - want)) <= 1e-3 * scale


# -- in-process ---------------------------------------------------------------------------------


async def _for_seconds(once: Any, clients: int, seconds: float) -> dict[str, Any]:
    """``clients`` tasks calling ``once(i)`` back to back: after ``WARM_UP_S``, for
    ``seconds``."""
    latencies: list[float] = []
    failures = 0
    start = time.perf_counter()
    measure_from, end = start + WARM_UP_S, start + WARM_UP_S + seconds

    async def client(i: int) -> None:
        nonlocal failures
        while True:
            t = time.perf_counter()
            if t >= end:
                return
            ok = await once(i)
            done = time.perf_counter()
            if t >= measure_from and done <= end:
                if ok:
                    latencies.append(done - t)
                else:
                    failures += 1

    await asyncio.gather(*(client(i) for i in range(clients)))
    return _summary(latencies, seconds, failures)


async def _in_process(
    folder: Path, shape: tuple[int, ...], clients: list[int], seconds: float
) -> tuple[dict[str, Any], list[np.ndarray], list[np.ndarray]]:
    from asyncvk import Net
    from asyncvk.serve._batcher import Batcher

    in_name, out_name = blob_names(folder)
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(VARIANTS)]
    async with Net() as net:
        await net.load_param(folder / "model.param")
        await net.load_model(folder / "model.bin")
        outputs = [(await net.run({in_name: x}, [out_name]))[out_name] for x in inputs]
        await net.background_builds()
        for x in inputs:  # the plans again, with every pipeline the background built
            await net.run({in_name: x}, [out_name])

        async def plain(i: int) -> bool:
            got = await net.run({in_name: inputs[i % VARIANTS]}, [out_name])
            return _close(got[out_name], outputs[i % VARIANTS])

        batcher = Batcher(net)

        async def batched(i: int) -> bool:
            x = inputs[i % VARIANTS][np.newaxis]
            got = await batcher.infer({in_name: x}, [out_name])
            return _close(got[out_name][0], outputs[i % VARIANTS])

        report: dict[str, Any] = {}
        for c in clients:
            report[str(c)] = {
                "in_process": await _for_seconds(plain, c, seconds),
                "in_process_batcher": await _for_seconds(batched, c, seconds),
            }
    return report, inputs, outputs


# -- HTTP clients (child processes) ---------------------------------------------------------------


def _request(model: str, in_name: str, out_name: str, x: np.ndarray) -> tuple[bytes, str]:
    raw = np.ascontiguousarray(x[np.newaxis], "<f4").tobytes()
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": in_name,
                    "shape": [1, *x.shape],
                    "datatype": "FP32",
                    "parameters": {"binary_data_size": len(raw)},
                }
            ],
            "outputs": [{"name": out_name, "parameters": {"binary_data": True}}],
        }
    ).encode()
    return header + raw, str(len(header))


async def _client_main(spec: dict[str, Any]) -> dict[str, Any]:
    import aiohttp

    inputs = [np.load(p) for p in spec["inputs"]]
    outputs = [np.load(p) for p in spec["outputs"]]
    bodies = [_request(spec["model"], spec["input"], spec["output"], x) for x in inputs]
    url = f"http://127.0.0.1:{spec['port']}/v2/models/{spec['model']}/infer"
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    wrong = 0
    start = time.perf_counter()
    measure_from = start + WARM_UP_S
    end = measure_from + spec["seconds"]
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def client(i: int) -> None:
            nonlocal wrong
            body, length = bodies[i % VARIANTS]
            want = outputs[i % VARIANTS]
            headers = {
                "Inference-Header-Content-Length": length,
                "Content-Type": "application/octet-stream",
            }
            while (t := time.perf_counter()) < end:
                async with http.post(url, data=body, headers=headers) as r:
                    data = await r.read()
                    status = r.status
                    split = int(r.headers.get("Inference-Header-Content-Length", len(data)))
                done = time.perf_counter()
                if status != 200:
                    statuses[str(status)] = statuses.get(str(status), 0) + 1
                    continue
                got = np.frombuffer(data[split:], "<f4").reshape((1, *want.shape))[0]
                if not _close(got, want):
                    wrong += 1
                elif t >= measure_from and done <= end:
                    latencies.append(done - t)

        await asyncio.gather(*(client(spec["first"] + i) for i in range(spec["clients"])))
    return {"latencies": latencies, "statuses": statuses, "wrong": wrong}


async def _grpc_client_main(spec: dict[str, Any]) -> dict[str, Any]:
    """The same clients over gRPC: one channel per process, each request serialized once."""
    import grpc

    from asyncvk.serve._grpc_messages import MESSAGES, SERVICE

    inputs = [np.load(p) for p in spec["inputs"]]
    outputs = [np.load(p) for p in spec["outputs"]]
    bodies = []
    for x in inputs:
        request = MESSAGES["ModelInferRequest"](model_name=spec["model"])
        request.inputs.add(name=spec["input"], datatype="FP32", shape=[1, *x.shape])
        request.outputs.add(name=spec["output"])
        request.raw_input_contents.append(np.ascontiguousarray(x, "<f4").tobytes())
        bodies.append(request.SerializeToString())
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    wrong = 0
    start = time.perf_counter()
    measure_from = start + WARM_UP_S
    end = measure_from + spec["seconds"]
    options = [("grpc.max_receive_message_length", 64 << 20)]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{spec['grpc_port']}", options) as channel:
        infer = channel.unary_unary(
            f"/{SERVICE}/ModelInfer",
            request_serializer=None,
            response_deserializer=MESSAGES["ModelInferResponse"].FromString,
        )

        async def client(i: int) -> None:
            nonlocal wrong
            body, want = bodies[i % VARIANTS], outputs[i % VARIANTS]
            while (t := time.perf_counter()) < end:
                try:
                    reply = await infer(body)
                except grpc.aio.AioRpcError as exc:
                    statuses[exc.code().name] = statuses.get(exc.code().name, 0) + 1
                    continue
                done = time.perf_counter()
                got = np.frombuffer(reply.raw_output_contents[0], "<f4")
                if not _close(got.reshape((1, *want.shape))[0], want):
                    wrong += 1
                elif t >= measure_from and done <= end:
                    latencies.append(done - t)

        await asyncio.gather(*(client(spec["first"] + i) for i in range(spec["clients"])))
    return {"latencies": latencies, "statuses": statuses, "wrong": wrong}


def _clients(spec: dict[str, Any], processes: int) -> dict[str, Any]:
    """``spec["clients"]`` clients over up to ``processes`` child processes, run at once."""
    n = spec["clients"]
    k = max(1, min(processes, n))
    children = []
    first = 0
    for p in range(k):
        share = n // k + (1 if p < n % k else 0)
        child = dict(spec, clients=share, first=first)
        first += share
        children.append(
            subprocess.Popen(
                [sys.executable, __file__, "--client", json.dumps(child)],
                stdout=subprocess.PIPE,
                env=child_env(),
                cwd=ROOT,
            )
        )
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    wrong = 0
    for child_proc in children:
        out, _ = child_proc.communicate(timeout=spec["seconds"] + 120)
        if child_proc.returncode != 0:
            raise RuntimeError("a client process failed")
        result = json.loads(out.decode().strip().splitlines()[-1])
        latencies += result["latencies"]
        wrong += result["wrong"]
        for status, count in result["statuses"].items():
            statuses[status] = statuses.get(status, 0) + count
    if wrong:
        raise RuntimeError(f"{wrong} wrong answers at {n} clients")
    summary = _summary(latencies, spec["seconds"], sum(statuses.values()))
    summary["statuses_not_200"] = statuses
    summary["client_processes"] = k
    return summary


# -- the server -----------------------------------------------------------------------------------


def _metrics(port: int) -> dict[str, float]:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line and not line.startswith("#")
    }


def _wait_ready(port: int, proc: subprocess.Popen[bytes], timeout: float = 300) -> None:
    import urllib.error
    import urllib.request

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode}")
        try:  # every worker: 16 fresh connections in a row find one ready
            for _ in range(16):
                url = f"http://127.0.0.1:{port}/v2/health/ready"
                with urllib.request.urlopen(url, timeout=5):
                    pass
            return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.1)
    raise RuntimeError("the server was not ready in time")


def _serve(
    folder: Path, name: str, shape: tuple[int, ...], ports: tuple[int, int | None], extra: list[str]
) -> subprocess.Popen[bytes]:
    in_name, _ = blob_names(folder)
    command = [
        sys.executable, "-m", "asyncvk", "serve", str(folder / "model.param"),
        str(folder / "model.bin"), "--name", name, "--port", str(ports[0]), "--no-access-log",
        "--warm-up", f"{in_name}={','.join(map(str, shape))}", *extra,
    ]  # fmt: skip
    if ports[1] is not None:
        command += ["--grpc-port", str(ports[1])]
    return subprocess.Popen(command, env=child_env(), cwd=ROOT, stdout=subprocess.DEVNULL)


def _batches(before: dict[str, float], after: dict[str, float], name: str) -> dict[str, Any]:
    def delta(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    label = f'{{model="{name}"}}'
    batches = delta(f"asyncvk_model_batches_total{label}")
    items = delta(f"asyncvk_model_inferences_total{label}")
    return {
        "batches": int(batches),
        "mean_batch_items": round(items / batches, 2) if batches else 0.0,
    }


def saved_variants(
    folder: Path, inputs: list[np.ndarray], outputs: list[np.ndarray]
) -> tuple[list[str], list[str]]:
    """The input variants and their expected outputs as .npy files in ``folder``, for the
    client processes: (input paths, output paths)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths_in, paths_out = [], []
    for i, (x, y) in enumerate(zip(inputs, outputs, strict=True)):
        np.save(folder / f"x{i}.npy", x)
        np.save(folder / f"y{i}.npy", y)
        paths_in.append(str(folder / f"x{i}.npy"))
        paths_out.append(str(folder / f"y{i}.npy"))
    return paths_in, paths_out


def client_spec(
    ports: tuple[int, int | None], model: str, blobs: tuple[str, str],
    paths: tuple[list[str], list[str]], clients: int, seconds: float,
) -> dict[str, Any]:  # fmt: skip
    """What the client processes are given, less the protocol (``_clients`` adds their share):
    the server's (HTTP, gRPC) ports, the model, its (input, output) blob, the variants'
    (input, output) files."""
    return {
        "port": ports[0], "grpc_port": ports[1], "model": model, "input": blobs[0],
        "output": blobs[1], "inputs": paths[0], "outputs": paths[1], "seconds": seconds,
        "clients": clients, "first": 0,
    }  # fmt: skip


def _model(args: argparse.Namespace, name: str, shape: tuple[int, ...]) -> dict[str, Any]:
    folder = MODELS / name
    clients = [int(c) for c in args.clients.split(",")]
    report, inputs, outputs = asyncio.run(_in_process(folder, shape, clients, args.seconds))
    paths_in, paths_out = saved_variants(Path(args.work) / name, inputs, outputs)
    in_name, out_name = blob_names(folder)
    port = free_port()
    grpc_port = free_port() if "grpc" in args.protocols.split(",") else None
    proc = _serve(folder, name, shape, (port, grpc_port), args.serve_args)
    try:
        _wait_ready(port, proc)
        for c in clients:
            spec = client_spec(
                (port, grpc_port), name, (in_name, out_name), (paths_in, paths_out), c,
                args.seconds,
            )  # fmt: skip
            for protocol in args.protocols.split(","):
                before = _metrics(port)
                served = _clients(dict(spec, protocol=protocol), args.client_processes)
                if "--workers" not in args.serve_args:  # /metrics is one worker's own
                    served.update(_batches(before, _metrics(port), name))
                report[str(c)][protocol] = served
            print(f"{name} x{c}: {json.dumps(report[str(c)])}", file=sys.stderr, flush=True)
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    return {"model": name, "shape": list(shape), "by_clients": report}


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--client":
        spec = json.loads(sys.argv[2])
        client_main = _grpc_client_main if spec["protocol"] == "grpc" else _client_main
        print(json.dumps(asyncio.run(client_main(spec))))
        return
    argv = sys.argv[1:]
    serve_args: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, serve_args = argv[:at], argv[at + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="squeezenet,mobilenetv2,rrdb")
    parser.add_argument("--shape", action="append", default=[], metavar="MODEL=C,H,W")
    parser.add_argument("--clients", default="1,4,16,64")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--client-processes", type=int, default=4)
    parser.add_argument("--protocols", default="http,grpc", help="http, grpc or both")
    parser.add_argument("--work", default="/tmp/asyncvk-server-throughput")
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    args.serve_args = serve_args
    shapes = {}
    for spec in args.shape:
        name, _, dims = spec.partition("=")
        shapes[name] = tuple(int(d) for d in dims.split(","))
    from asyncvk import get_gpu_info

    info = get_gpu_info()
    results = []
    for name in args.models.split(","):
        shape = shapes.get(name) or tuple(np.load(MODELS / name / "input.npy").shape)
        results.append(_model(args, name, shape))
    emit(
        {
            "benchmark": "server_throughput",
            "date": datetime.date.today().isoformat(),
            "device": info.device_name,
            "driver": info.driver_info,
            "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "seconds_per_point": args.seconds,
            "serve_args": serve_args,
            "models": results,
        },
        args.out,
    )


if __name__ == "__main__":
    main()
