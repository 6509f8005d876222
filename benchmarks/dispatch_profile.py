"""Where asyncvk's inference time goes on the GPU: a timestamp around every dispatch, per model.

    python benchmarks/dispatch_profile.py [--models a,b] [--models-dir tests/models]
        [--suite DIR [--suite-models a,b]] [--loops 20] [--top 15] [--fp16] [--fp16-arith]
        [--all-dispatches] [--out FILE.json]

Models: the folders of ``--models-dir`` named by ``--models`` (default: all of tests/models;
``--models ''`` for none) and, with ``--suite DIR``, the folders ``benchmarks/suite_models.py``
made. Each folder's ``meta.json`` names the input and output blobs.

Each model runs in a fresh process: loaded once, then timed twice over ``--loops`` extractions
after three warm-up runs, first with the Net's own plan (``wall_ms``: the latency users get),
then with a ProfilingExtractor, whose plan writes a GPU timestamp around each dispatch. Per model
the report gives, from the profiled runs (each dispatch's median over the loops):

* ``dispatch_gpu_ms``: the dispatches' GPU time, summed; ``command_buffer_gpu_ms``: each command
  buffer from its first command to its last (barriers, copies and idle between dispatches in);
* ``wall_ms_profiled`` and ``host_ms`` = that minus ``command_buffer_gpu_ms``: submission, fence
  wait wake-up, input and output copies, CPU layers; ``gpu_busy_percent`` = dispatch time over
  the plain ``wall_ms``;
* ``by_layer_type`` (ms and % of dispatch time), the ``--top`` slowest dispatches (layer, type,
  pipeline, shader, workgroups), and the numbers of dispatches, barriers and command buffers.

Timestamps serialise dispatches that could overlap, so ``wall_ms_profiled`` can be a little
over ``wall_ms``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _common import MODELS, blob_names, emit, model_folders, timed_extractions

from asyncvk import Net, Option, get_gpu_info
from asyncvk.net._dispatch_profile import (
    DispatchProfile,
    ProfilingExtractor,
    median_profile,
    profile_summary,
)


async def profile_model(
    d: Path, loops: int, top: int, option: Option, every: bool
) -> dict[str, Any]:
    """Plain and profiled latency of one model folder, in this process."""
    in_name, out_name = blob_names(d)
    x = np.load(d / "input.npy")
    async with Net(option) as net:
        await net.load_param(d / "model.param")
        await net.load_model(d / "model.bin")
        await net.background_builds()  # time what the model settles on

        walls = await timed_extractions(net, in_name, x, out_name, loops)
        profiled_walls: list[float] = []
        profiles: list[DispatchProfile] = []
        async with ProfilingExtractor(net) as ex:
            ex.input(in_name, x)
            for i in range(3 + loops):
                t = time.perf_counter()
                await ex.extract(out_name)
                elapsed = time.perf_counter() - t
                if i >= 3 and ex.profile is not None:
                    profiled_walls.append(elapsed)
                    profiles.append(ex.profile)
    profile = median_profile(profiles)
    summary = profile_summary(profile, top=top)
    wall_ms = statistics.median(walls) * 1000
    profiled_ms = statistics.median(profiled_walls) * 1000
    row: dict[str, Any] = {
        "wall_ms": round(wall_ms, 4),
        "wall_ms_profiled": round(profiled_ms, 4),
        "dispatch_gpu_ms": summary.pop("dispatch_gpu_ms"),
        "command_buffer_gpu_ms": summary.pop("command_buffer_gpu_ms"),
    }
    row["host_ms"] = round(profiled_ms - row["command_buffer_gpu_ms"], 4)
    row["gpu_busy_percent"] = round(100 * row["dispatch_gpu_ms"] / wall_ms, 1)
    row.update(summary)
    if every:
        row["all_dispatches"] = [
            [d.layer, d.layer_type, d.shader, round(d.gpu_ms, 4)] for d in profile.dispatches
        ]
    return row


def _in_child(d: Path, args: argparse.Namespace) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--child-dir", str(d), "--loops", str(args.loops)]
    argv += ["--top", str(args.top)] + ["--fp16"] * args.fp16
    argv += ["--fp16-arith"] * args.fp16_arith
    argv += ["--all-dispatches"] * args.all_dispatches
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout} s"}
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines()
        return {"error": lines[-1][:300] if lines else "failed"}
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None, help="--models-dir names (default: all)")
    parser.add_argument("--models-dir", type=Path, default=MODELS)
    parser.add_argument("--suite", type=Path, default=None, help="suite_models.py's output")
    parser.add_argument("--suite-models", default="", help="comma-separated (default: all)")
    parser.add_argument("--loops", type=int, default=20)
    parser.add_argument("--top", type=int, default=15, help="slowest dispatches listed")
    parser.add_argument("--fp16", action="store_true", help="fp16 storage (as ncnn's default)")
    parser.add_argument(
        "--fp16-arith", action="store_true", help="fp16 arithmetic (the matrix-unit convolution)"
    )
    parser.add_argument("--all-dispatches", action="store_true", help="list every dispatch")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per model")
    parser.add_argument("--out", default=None)
    parser.add_argument("--child-dir", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.loops < 1:
        parser.error("--loops must be at least 1")
    if args.child_dir is not None:
        option = Option(use_fp16_storage=args.fp16, use_fp16_arithmetic=args.fp16_arith)
        row = asyncio.run(
            profile_model(args.child_dir, args.loops, args.top, option, args.all_dispatches)
        )
        print(json.dumps(row))
        return 0
    if args.models is None:
        args.models = ",".join(
            sorted(p.name for p in args.models_dir.iterdir() if (p / "meta.json").exists())
        )
    folders = model_folders(args.models, args.suite, args.suite_models, args.models_dir)
    info = get_gpu_info()
    report: dict[str, Any] = {
        "device": info.device_name,
        "driver": f"{info.driver_name} {info.driver_info}",
        "cpu_count": os.cpu_count(),
        "loops": args.loops,
        "fp16_storage": args.fp16,
        "fp16_arithmetic": args.fp16_arith,
        "isolation": "one fresh process per model",
        "models": [],
    }
    for source, d in folders:
        row = {"model": d.name, "source": source, **_in_child(d, args)}
        report["models"].append(row)
        brief = {
            k: row.get(k) for k in ("model", "wall_ms", "dispatch_gpu_ms", "error") if k in row
        }
        print(json.dumps(brief), file=sys.stderr, flush=True)
        if args.out:  # what is done so far survives a run cut short
            Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    emit(report, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
