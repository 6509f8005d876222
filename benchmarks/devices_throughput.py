"""Throughput over several GPUs against one, and a GPU taken away mid-run, every answer checked.

    python benchmarks/devices_throughput.py [--models squeezenet,mobilenetv2] [--devices 0,1]
        [--clients 64,256] [--seconds 5] [--workers 8] [--client-processes 8] [--out FILE.json]

For each model and each concurrency C, one GPU (``--devices``' first) beside all of them, in
one run:

- ``in_process``: C tasks sending one item each through the server's dynamic batcher over a
  ``NetGroup`` (the same objects ``asyncvk serve --devices`` builds), no network;
- ``http``: ``asyncvk serve --devices D --workers W --warm-up-batches`` in a fresh process, C
  clients speaking the Open Inference Protocol with binary tensors over 127.0.0.1, spread over
  ``--client-processes`` processes (the clients of ``server_throughput.py``).

Each answer is compared with the single-device output of its input (one of 8 variants; relative
L2 1e-3), so a wrong or mixed-up answer fails the run; every status but 200 is counted.

Then ``taken_away``: in process, C clients through the batcher over every GPU; half-way through,
the last GPU's queue is held by a command buffer that waits on a host event and its fence
timeout is cut to 0.5 s, the failure a hung GPU gives. Reported: requests sent, answered right,
wrong and failed (the goal: every request answered right), the member taken out, and
requests/s before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import MODELS, ROOT, blob_names, emit, free_port
from server_throughput import (
    _clients,
    _close,
    _for_seconds,
    _serve,
    _wait_ready,
    client_spec,
    saved_variants,
)

sys.path.insert(0, str(ROOT / "tests"))
VARIANTS = 8
#: the failing GPU's fence timeout: how long a batch sent to it waits before going elsewhere
FAILING_TIMEOUT_S = 0.5


async def _group(folder: Path, devices: list[int]) -> Any:
    from asyncvk import NetGroup, Option

    group = NetGroup(devices, Option(plan_idle_seconds=600))
    await group.load_param(folder / "model.param")
    await group.load_model(folder / "model.bin")
    return group


async def _warm(batcher: Any, inputs: list[np.ndarray], in_name: str) -> None:
    """Every batch size's plan on every member, and the background pipelines adopted."""
    for net in batcher.net.serving_nets:
        await net.background_builds()
    for size in range(1, batcher.settings.max_batch + 1):
        batch = np.stack([inputs[i % VARIANTS] for i in range(size)])
        await asyncio.gather(*(batcher.infer({in_name: batch}) for _ in batcher.net.serving_nets))


async def _in_process(
    folder: Path, devices: list[int], clients: list[int], seconds: float
) -> tuple[dict[str, Any], list[np.ndarray], list[np.ndarray]]:
    from asyncvk.serve._batcher import Batcher

    in_name, out_name = blob_names(folder)
    shape = np.load(folder / "input.npy").shape
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-1, 1, shape).astype(np.float32) for _ in range(VARIANTS)]
    report: dict[str, Any] = {str(c): {} for c in clients}
    outputs: list[np.ndarray] = []
    for label, members in (("one_gpu", devices[:1]), ("all_gpus", devices)):
        async with await _group(folder, members) as group:
            if not outputs:
                outputs = [(await group.run({in_name: x}, [out_name]))[out_name] for x in inputs]
            batcher = Batcher(group)
            await _warm(batcher, inputs, in_name)

            async def batched(
                i: int, batcher: Batcher = batcher, outputs: list[np.ndarray] = outputs
            ) -> bool:
                got = await batcher.infer({in_name: inputs[i % VARIANTS][np.newaxis]}, [out_name])
                return _close(got[out_name][0], outputs[i % VARIANTS])

            for c in clients:
                report[str(c)][label] = await _for_seconds(batched, c, seconds)
                print(f"in process {label} x{c}: {report[str(c)][label]}", file=sys.stderr)
    return report, inputs, outputs


async def _taken_away(
    folder: Path, devices: list[int], clients: int, seconds: float,
    inputs: list[np.ndarray], outputs: list[np.ndarray],
) -> dict[str, Any]:  # fmt: skip
    from test_net_group import held

    from asyncvk.serve._batcher import Batcher

    in_name, out_name = blob_names(folder)
    counts = {"sent": 0, "right": 0, "wrong": 0, "failed": 0}
    errors: list[str] = []
    done_at: list[float] = []
    async with await _group(folder, devices) as group:
        batcher = Batcher(group)
        await _warm(batcher, inputs, in_name)
        failing = group.nets[-1].device
        start = time.perf_counter()
        gate_at, end = start + seconds / 2, start + seconds

        async def client(i: int) -> None:
            while time.perf_counter() < end:
                counts["sent"] += 1
                try:
                    got = await batcher.infer(
                        {in_name: inputs[i % VARIANTS][np.newaxis]}, [out_name]
                    )
                except Exception as exc:  # counted: the goal is none
                    counts["failed"] += 1
                    errors.append(f"{type(exc).__name__}: {exc}"[:300])
                    continue
                ok = _close(got[out_name][0], outputs[i % VARIANTS])
                counts["right" if ok else "wrong"] += 1
                done_at.append(time.perf_counter())

        running = asyncio.gather(*(client(i) for i in range(clients)))
        await asyncio.sleep(gate_at - time.perf_counter())
        async with held(failing, FAILING_TIMEOUT_S):  # the gate opens once the clients end
            await running
            statistics = group.statistics()
    before = sum(1 for t in done_at if t < gate_at)
    return {
        "clients": clients,
        "seconds": seconds,
        **counts,
        "errors": errors[:5],
        "members": [
            {"device": s.device, "runs_done": s.runs_done, "taken_out": s.reason}
            for s in statistics
        ],
        "requests_per_s_before": round(before / (seconds / 2), 1),
        "requests_per_s_after": round((len(done_at) - before) / (seconds / 2), 1),
    }


def _http(
    args: argparse.Namespace, name: str, devices: list[int],
    inputs: list[np.ndarray], outputs: list[np.ndarray], report: dict[str, Any],
) -> None:  # fmt: skip
    folder = MODELS / name
    paths_in, paths_out = saved_variants(Path(args.work) / name, inputs, outputs)
    in_name, out_name = blob_names(folder)
    for label, members in (("one_gpu", devices[:1]), ("all_gpus", devices)):
        port = free_port()
        extra = ["--devices", ",".join(map(str, members)), "--warm-up-batches"]
        extra += ["--workers", str(args.workers)] if args.workers > 1 else []
        shape = tuple(inputs[0].shape)
        proc = _serve(folder, name, shape, (port, None), extra)
        try:
            _wait_ready(port, proc)
            for c in report:
                spec = client_spec(
                    (port, None), name, (in_name, out_name), (paths_in, paths_out), int(c),
                    args.seconds,
                )  # fmt: skip
                spec["protocol"] = "http"
                report[c][f"http_{label}"] = _clients(spec, args.client_processes)
                print(f"http {label} x{c}: {report[c][f'http_{label}']}", file=sys.stderr)
        finally:
            proc.terminate()
            proc.wait(timeout=60)


def _ratios(point: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for kind in ("", "http_"):
        one, every = point.get(f"{kind}one_gpu"), point.get(f"{kind}all_gpus")
        if one and every and one["requests_per_s"]:
            out[f"{kind or 'in_process_'}speedup"] = round(
                every["requests_per_s"] / one["requests_per_s"], 2
            )
            out[f"{kind or 'in_process_'}p99_over_p50"] = round(
                every["p99_ms"] / every["p50_ms"], 2
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="squeezenet,mobilenetv2")
    parser.add_argument("--devices", default="all", help="'all' or indices, e.g. 0,1")
    parser.add_argument("--clients", default="64,256")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--client-processes", type=int, default=8)
    parser.add_argument("--no-http", action="store_true", help="in process only")
    parser.add_argument("--work", default="/tmp/asyncvk-devices-throughput")
    parser.add_argument("--out")
    args = parser.parse_args()
    from asyncvk import get_gpu_count, get_gpu_info

    count = get_gpu_count()
    devices = list(range(count)) if args.devices == "all" else [
        int(d) for d in args.devices.split(",")
    ]  # fmt: skip
    if len(devices) < 2:
        raise SystemExit(f"devices_throughput: needs two devices or more, has {devices}")
    clients = [int(c) for c in args.clients.split(",")]
    results = []
    for name in args.models.split(","):
        folder = MODELS / name
        report, inputs, outputs = asyncio.run(_in_process(folder, devices, clients, args.seconds))
        if not args.no_http:
            _http(args, name, devices, inputs, outputs, report)
        for point in report.values():
            point.update(_ratios(point))
        away = asyncio.run(
            _taken_away(folder, devices, max(clients), 2 * args.seconds, inputs, outputs)
        )
        print(f"{name} taken away: {away}", file=sys.stderr)
        results.append({"model": name, "by_clients": report, "taken_away": away})
    infos = [get_gpu_info(d) for d in devices]
    emit(
        {
            "benchmark": "devices_throughput",
            "date": datetime.date.today().isoformat(),
            "devices": [
                {"index": d, "name": i.device_name} for d, i in zip(devices, infos, strict=True)
            ],
            "driver": infos[0].driver_info,
            "host": {"cpus": os.cpu_count(), "python": platform.python_version()},
            "seconds_per_point": args.seconds,
            "workers": args.workers,
            "client_processes": args.client_processes,
            "summary": _summary_lines(results),
            "models": results,
        },
        args.out,
    )


def _summary_lines(results: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in results:
        for c, point in r["by_clients"].items():
            ratios = ", ".join(f"{k} {v}" for k, v in point.items() if not isinstance(v, dict))
            lines.append(f"{r['model']} x{c}: {ratios}")
        away = r["taken_away"]
        lines.append(
            f"{r['model']} taken away: sent {away['sent']}, right {away['right']}, "
            f"wrong {away['wrong']}, failed {away['failed']}"
        )
    return lines


if __name__ == "__main__":
    main()
