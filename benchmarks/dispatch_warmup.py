"""Can a warm-up move lavapipe's shader compile off the first inference, and overlap it?

    MESA_SHADER_CACHE_DISABLE=true python benchmarks/dispatch_warmup.py [--models a,b]
                                                                        [--runs 3] [--out F]

llvmpipe compiles a compute shader at the pipeline's first dispatch (on its queue's thread), not
in ``vkCreateComputePipelines``. After a cold ``load_model``, each fresh process does one of:

* ``none``: the first inference as usual (it pays for every compile);
* ``wait``: one single-workgroup dispatch of every pipeline, with zero push constants (every
  shader returns early for a zero size) and a scratch buffer, waited for; then the inference;
* ``async``: the same warm-up submitted without waiting, so the first inference's plan build
  (Python) overlaps the compiles (the queue runs them first, in order).

Reported per mode: the warm-up, the first inference, their sum, and the second inference, in ms
(median over ``--runs`` processes), and the output's relative error against the reference.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from typing import Any

from _common import MODELS, emit, model_names, run_child

MODES = ("none", "wait", "async")

CHILD = r"""
import asyncio, json, sys, time
import numpy as np
from asyncvk.cli._runner import RunConfig, open_net
from asyncvk.gpu import CommandRecorder

folder, mode = sys.argv[1], sys.argv[2]

async def main():
    opened = await open_net(RunConfig(f"{folder}/model.param", f"{folder}/model.bin"))
    net = opened.net
    dev = net.device
    bound = net.gpu_model.bound.values()
    pipelines = {id(p): p for n in bound for p in n.pipelines.values()}
    t0 = time.perf_counter()
    if mode != "none":
        scratch = dev.allocate(1 << 20)
        rec = CommandRecorder(dev, one_time=True)
        for p in pipelines.values():
            rec.dispatch(p, [scratch] * p.binding_count, bytes(p.push_constant_size), (1, 1, 1))
        fence = dev.submit(rec.finish())
        if mode == "wait":
            dev.wait(fence)
    t1 = time.perf_counter()
    x = np.load(f"{folder}/input.npy")
    ex = net.create_extractor(); ex.input("in0", x); y = await ex.extract("out0")
    t2 = time.perf_counter()
    ex = net.create_extractor(); ex.input("in0", x); await ex.extract("out0")
    t3 = time.perf_counter()
    ref = np.load(f"{folder}/output.npy")
    print(json.dumps({
        "pipelines": len(pipelines), "warmup_ms": 1e3 * (t1 - t0), "first_ms": 1e3 * (t2 - t1),
        "warmup_plus_first_ms": 1e3 * (t2 - t0), "second_ms": 1e3 * (t3 - t2),
        "rel_error": float(np.linalg.norm(y - ref) / np.linalg.norm(ref)),
    }))

asyncio.run(main())
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(model_names()))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", help="also write the JSON here")
    args = parser.parse_args(argv)
    from asyncvk.gpu import get_gpu_info

    rows = []
    for model in args.models.split(","):
        row: dict[str, Any] = {"model": model}
        for mode in MODES:
            runs = [run_child(CHILD, str(MODELS / model), mode) for _ in range(args.runs)]
            row[mode] = {
                k: round(statistics.median(r[k] for r in runs), 2)
                for k in runs[0]
                if k.endswith("_ms")
            }
            row[mode]["rel_error"] = max(r["rel_error"] for r in runs)
            row["pipelines"] = runs[0]["pipelines"]
        base = row["none"]["first_ms"]
        row["wait_total_over_none"] = round(row["wait"]["warmup_plus_first_ms"] / base, 3)
        row["async_total_over_none"] = round(row["async"]["warmup_plus_first_ms"] / base, 3)
        print(json.dumps(row), file=sys.stderr)
        rows.append(row)
    info = get_gpu_info()
    report = {"device": info.device_name, "runs": args.runs, "models": rows}
    emit(report, args.out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
