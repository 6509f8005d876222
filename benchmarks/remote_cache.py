"""A second machine warm from Redis against one warm from a local file, and Redis down.

    python benchmarks/remote_cache.py [--models cunet,squeezenet] [--runs 5]
                                      [--redis-server PATH] [--out FILE.json]

Each sample is a fresh ``asyncvk run`` process, timed by ``cold_start``'s clock (spawn to the
moment the first output is in hand, ``first_output_s``; the in-process ``load_model_s`` beside):

* ``local_file``: ``--cache FILE``, a file a cold run saved (the baseline of ``remote_warm``).
* ``remote_warm``: a fresh, empty ``--cache-dir`` and ``--remote-cache`` on a Redis that a cold
  run filled: a second machine of the fleet. Goal: within 10% of ``local_file``.
* ``no_remote_cold``: an empty cache folder, no remote cache (the baseline of ``remote_down_cold``).
* ``remote_down_cold``: the same with ``--remote-cache`` on a port nobody listens on. Goal:
  within 5% of ``no_remote_cold`` (the timeout does not stall it).
* ``local_file_remote_down``: ``local_file`` with Redis down.

The kinds run interleaved, ``--runs`` times each, each run starting one kind later than the
last (so no kind always follows the cold ones); medians. redis-server is started here on a
free loopback port (``--redis-server``: a binary, e.g. one unpacked from the Debian packages
with ``dpkg -x``, and ``--redis-lib`` the folder of their libraries).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import MODELS, child_env, emit, free_port
from cold_start import _spawn, _summary

KINDS = (
    "local_file",
    "remote_warm",
    "no_remote_cold",
    "remote_down_cold",
    "local_file_remote_down",
)


def _start_redis(binary: str, folder: Path, lib: str | None) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    env = dict(os.environ, LD_LIBRARY_PATH=lib) if lib else None
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=folder,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"redis-server exited: {proc.stderr.read().decode() if proc.stderr else ''}"
            )
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return proc, port
        except OSError:
            time.sleep(0.02)
    proc.kill()
    raise RuntimeError(f"redis-server did not answer on port {port}")


def _argv(folder: Path, meta: dict[str, Any], *extra: str) -> list[str]:
    inp = folder / "input.npy"
    return [
        sys.executable, "-m", "asyncvk", "run", str(folder / "model.param"),
        str(folder / "model.bin"), "--input", f"{meta['input']}={inp}",
        "--output", meta["output"], *extra, "--json",
    ]  # fmt: skip


def measure(
    folder: Path, runs: int, redis_url: str, down_url: str, timeout: float
) -> dict[str, Any]:
    meta = json.loads((folder / "meta.json").read_text())
    env = child_env()
    env.pop("ASYNCVK_REMOTE_CACHE", None)
    env.pop("ASYNCVK_REMOTE_CACHE_KEY", None)
    samples: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        file = work / "model.vkcache"
        # set-up: one cold run saves the local file, one fills Redis
        for extra in (("--cache", str(file)), ("--remote-cache", redis_url)):
            setup = _spawn(_argv(folder, meta, *extra), env, timeout)
            if "error" in setup:
                raise RuntimeError(f"{folder.name} set-up failed: {setup['error']}")
        for run in range(runs):

            def fresh(kind: str, run: int = run) -> str:
                return str(work / f"{kind}-{run}")

            kinds = {
                "local_file": ("--cache", str(file)),
                "remote_warm": ("--cache-dir", fresh("rw"), "--graph-key", "m",
                                "--remote-cache", redis_url),
                "no_remote_cold": ("--cache-dir", fresh("nr"), "--graph-key", "m"),
                "remote_down_cold": ("--cache-dir", fresh("rd"), "--graph-key", "m",
                                     "--remote-cache", down_url),
                "local_file_remote_down": ("--cache", str(file), "--remote-cache", down_url),
            }  # fmt: skip
            # each run starts one kind later: a kind's place in the run (after the cold ones,
            # say) is not its own cost. With a fixed order, local_file_remote_down, the same
            # work as local_file run last, read 1.06x it on average over 8 H100 cells
            order = list(kinds)
            order = order[run % len(order) :] + order[: run % len(order)]
            for kind in order:
                samples[kind].append(_spawn(_argv(folder, meta, *kinds[kind]), env, timeout))
    out: dict[str, Any] = {"model": folder.name}
    for kind, rows in samples.items():
        out[kind] = _summary(rows)
    out["ratios"] = _ratios(out)  # first_output_s is the goal's clock; load_s the in-process part
    return out


def _ratios(row: dict[str, Any]) -> dict[str, Any]:
    """The goals: remote_warm / local_file (<= 1.10) and remote_down / no_remote (<= 1.05)."""
    ratios: dict[str, Any] = {}
    pairs = {
        "remote_warm_vs_local_file": ("remote_warm", "local_file", 1.10),
        "remote_down_vs_no_remote_cold": ("remote_down_cold", "no_remote_cold", 1.05),
        "local_file_remote_down_vs_local_file": ("local_file_remote_down", "local_file", 1.05),
    }
    for kind in KINDS:  # a --cache FILE is loaded before load_model: count it in
        r = row[kind]
        if "load_model_s" in r:
            r["load_s"] = round(r["load_model_s"] + r.get("cache_load_s", 0.0), 4)
    for name, (a, b, goal) in pairs.items():
        for metric in ("first_output_s", "load_s"):
            x, y = row[a].get(metric), row[b].get(metric)
            if x and y:
                ratios[f"{name}.{metric}"] = {"ratio": round(x / y, 3), "goal": goal}
    return ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default="cunet,squeezenet")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--redis-server", default=shutil.which("redis-server"))
    parser.add_argument(
        "--redis-lib", help="LD_LIBRARY_PATH for redis-server alone (its libraries, unpacked)"
    )
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--out")
    args = parser.parse_args(argv)
    if not args.redis_server:
        parser.error("no redis-server found: install it or pass --redis-server PATH")
    with tempfile.TemporaryDirectory() as tmp:
        proc, port = _start_redis(args.redis_server, Path(tmp), args.redis_lib)
        try:
            url = f"redis://127.0.0.1:{port}/0"
            down = f"redis://127.0.0.1:{free_port()}/0"
            rows = [
                measure(MODELS / name, args.runs, url, down, args.timeout)
                for name in args.models.split(",")
            ]
        finally:
            proc.kill()
            proc.wait()
    from asyncvk.gpu import get_gpu_count, get_gpu_device

    device = get_gpu_device().info.device_name if get_gpu_count() else "none"
    emit(
        {"benchmark": "remote_cache", "device": device, "runs": args.runs, "models": rows}, args.out
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
