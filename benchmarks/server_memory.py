"""Server memory under bursts of concurrent requests: does ``asyncvk serve`` give it back?

    python benchmarks/server_memory.py [--model cunet] [--shape 3,64,64 ...]
                                       [--bursts 1,10,50,100,200] [--settle 3]
                                       [--burst-timeout 300] [--out FILE.json] [-- SERVE ARGS]

Starts ``asyncvk serve`` on the model in a fresh process on 127.0.0.1 (arguments after ``--``
go to it), waits for ``/ready``, then sends each burst: N requests at once, each a .npy of
``--shape`` (3x64x64 float32 is 48 KiB). While a burst runs, the server's RSS is sampled from
``/proc/PID/status``; ``--settle`` seconds after it, RSS is read again, so a server that keeps
what a burst took shows it. Every 200 answer is checked against the CPU reference of its input;
503s (a full wait queue) are counted, anything else fails the run. Bursts are bounded: each has
``--burst-timeout`` seconds, and N is at most 1000.

The report has, per burst, the RSS before, the peak during (VmRSS sampled every 20 ms; VmHWM is
the kernel's high-water mark since the server started), the RSS when the last answer came and
after settling, answers by status, and the server's plan and device memory figures from
``/metrics`` (the largest seen during the burst, and after settling).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import io
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
from _common import MODELS, ROOT, blob_names, child_env, emit, free_port

from asyncvk import Net, Option, get_gpu_info

MAX_BURST = 1000
#: variants of the input sent, so that an answer mixed up with another's fails the check
VARIANTS = 8
#: the server's figures recorded (``/metrics``; absent from a server without them)
WATCHED = {
    "asyncvk_plans",
    "asyncvk_plans_waiting",
    "asyncvk_plans_peak",
    "asyncvk_plans_built_total",
    "asyncvk_plans_released_total",
    "asyncvk_device_memory_reserved_bytes",
    "asyncvk_device_memory_used_bytes",
}


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of ``pid`` in bytes."""
    out = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value, _ = line.split()
                out[key.rstrip(":")] = int(value) * 1024
    return out


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


async def _references(
    model: Path, in_name: str, out_name: str, inputs: list[np.ndarray]
) -> list[np.ndarray]:
    """The CPU reference output of each input."""
    async with Net(Option(use_vulkan_compute=False)) as net:
        await net.load_param(model / "model.param")
        await net.load_model(model / "model.bin")
        outs = []
        for x in inputs:
            ex = net.create_extractor()
            ex.input(in_name, x)
            outs.append(await ex.extract(out_name))
    return outs


async def _metrics(http: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with http.get(f"{url}/metrics") as r:
        text = await r.text()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values


async def _wait_ready(http: aiohttp.ClientSession, url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the server exited with status {proc.returncode}")
        try:
            async with http.get(f"{url}/ready") as r:
                if r.status == 200:
                    return
        except aiohttp.ClientConnectionError:
            pass
        await asyncio.sleep(0.05)
    raise SystemExit("the server was not ready within 120 s")


async def _burst(
    http: aiohttp.ClientSession,
    url: str,
    pid: int,
    n: int,
    bodies: list[bytes],
    expected: list[np.ndarray],
    settle: float,
    limit_s: float,
) -> dict[str, Any]:
    """N requests at once; RSS sampled meanwhile and read again ``settle`` s after."""
    before = _status(pid)["VmRSS"]
    peak = before
    codes: dict[int, int] = {}
    worst = 0.0

    async def one(i: int) -> None:
        nonlocal worst
        async with http.post(
            f"{url}/infer", data=bodies[i % VARIANTS], headers={"Content-Type": "application/x-npy"}
        ) as r:
            body = await r.read()
            codes[r.status] = codes.get(r.status, 0) + 1
            if r.status == 503:
                return
            if r.status != 200:
                raise SystemExit(f"request {i} of {n}: {r.status} {body[:300]!r}")
            y = np.load(io.BytesIO(body))
            ref = expected[i % VARIANTS]
            err = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
            worst = max(worst, err)
            if not err < 1e-3:
                raise SystemExit(f"request {i} of {n}: relative error {err:.3g} against the CPU")

    start = time.monotonic()
    tasks = asyncio.gather(*[one(i) for i in range(n)])
    most: dict[str, float] = {}  # the largest of each server figure seen during the burst
    polls = 0
    while not tasks.done():
        peak = max(peak, _status(pid)["VmRSS"])
        if polls % 10 == 0:  # the server's own figures, every 0.2 s or so
            for key, value in (await _metrics(http, url)).items():
                if key in WATCHED:
                    most[key] = max(most.get(key, value), value)
        polls += 1
        await asyncio.wait([tasks], timeout=0.02)
        if time.monotonic() - start > limit_s:
            tasks.cancel()
            raise SystemExit(f"burst of {n}: not answered within {limit_s:g} s")
    await tasks
    seconds = time.monotonic() - start
    peak = max(peak, _status(pid)["VmRSS"])
    end = _status(pid)["VmRSS"]
    await asyncio.sleep(settle)
    after = _status(pid)
    settled = await _metrics(http, url)
    return {
        "n": n,
        "seconds": round(seconds, 3),
        "answers": {str(k): v for k, v in sorted(codes.items())},
        "worst_rel_err": float(f"{worst:.3g}"),
        "rss_before_mb": round(before / 1e6, 1),
        "rss_peak_mb": round(peak / 1e6, 1),
        "rss_at_end_mb": round(end / 1e6, 1),
        "rss_after_settle_mb": round(after["VmRSS"] / 1e6, 1),
        "hwm_since_start_mb": round(after["VmHWM"] / 1e6, 1),
        "server_most_during": most,
        "server_after_settle": {k: v for k, v in settled.items() if k in WATCHED},
    }


def _start(command: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        command, env=child_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def _serve_and_burst(
    model: Path, shape: tuple[int, ...], bursts: list[int], args: argparse.Namespace
) -> dict[str, Any]:
    """One fresh server for ``shape``: each burst in turn, with the RSS around it."""
    in_name, out_name = blob_names(model)
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal(shape).astype(np.float32) for _ in range(VARIANTS)]
    expected = await _references(model, in_name, out_name, inputs)
    bodies = [_npy(x) for x in inputs]
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    command = [
        sys.executable,
        "-m",
        "asyncvk",
        "serve",
        str(model / "model.param"),
        str(model / "model.bin"),
        "--port",
        str(port),
        "--no-access-log",
        *args.serve_args,
    ]
    proc = _start(command)
    results = []
    try:
        connector = aiohttp.TCPConnector(limit=MAX_BURST)
        timeout = aiohttp.ClientTimeout(total=args.burst_timeout)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
            await _wait_ready(http, url, proc)
            ready = _status(proc.pid)
            for n in bursts:
                result = await _burst(
                    http, url, proc.pid, n, bodies, expected, args.settle, args.burst_timeout
                )
                print(shape, result, file=sys.stderr, flush=True)
                results.append(result)
    finally:
        _stop(proc)
    return {
        "input_shape": list(shape),
        "request_bytes": len(bodies[0]),
        "rss_ready_mb": round(ready["VmRSS"] / 1e6, 1),
        "bursts": results,
    }


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="cunet", help="a folder of tests/models")
    parser.add_argument(
        "--shape",
        action="append",
        help="C,H,W of the requests' input, each in a fresh server (repeatable; default 3,64,64)",
    )
    parser.add_argument("--bursts", default="1,10,50,100,200")
    parser.add_argument("--settle", type=float, default=3.0, help="seconds after each burst")
    parser.add_argument("--burst-timeout", type=float, default=300.0)
    parser.add_argument("--out")
    parser.add_argument("serve_args", nargs="*", help="after --: more `asyncvk serve` arguments")
    args = parser.parse_args()
    bursts = [int(b) for b in args.bursts.split(",")]
    if not all(0 < b <= MAX_BURST for b in bursts):
        raise SystemExit(f"--bursts: each from 1 to {MAX_BURST}")
    model = MODELS / args.model
    shapes = [tuple(int(d) for d in s.split(",")) for s in args.shape or ["3,64,64"]]
    runs = [await _serve_and_burst(model, shape, bursts, args) for shape in shapes]
    info = get_gpu_info()
    emit(
        {
            "benchmark": "server_memory",
            "device": info.device_name,
            "driver": info.driver_name,
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "date": datetime.date.today().isoformat(),
            "model": args.model,
            "serve_args": args.serve_args,
            "settle_s": args.settle,
            "runs": runs,
        },
        args.out,
    )


if __name__ == "__main__":
    asyncio.run(main())
