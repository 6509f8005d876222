"""Host-time diagnosis as run on the H100 (2026-11-26) for extraction_pieces_h100.jsonl.

Each piece of an extraction timed: a blocking fence wait, a spin on vkGetFenceStatus, and the
plan run on the main thread. Kept as the record of that run: it was written against a trial
version of Plan (the whole run on one thread, ``Plan.run_blocking``) that was not kept, so it
does not run against the code as it is.
"""

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from asyncvk import Net, _vk
from asyncvk.gpu import _device
from asyncvk.net import _plan

acc = {}


def timed(name, fn):
    def w(*a, **k):
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            acc.setdefault(name, []).append(time.perf_counter() - t)

    return w


SPIN = False
orig_wait = _device.VulkanDevice.wait


def wait(self, fence):
    if SPIN:
        status = _vk._raw_lib.vkGetFenceStatus
        while status(self.handle, fence) != 0:
            pass
    return orig_wait(self, fence)


_plan.Plan._write = timed("write", _plan.Plan._write)
_plan.Plan._read = timed("read", _plan.Plan._read)
_plan.run_cpu_layer = timed("cpu_layer", _plan.run_cpu_layer)
_device.VulkanDevice.submit = timed("submit", _device.VulkanDevice.submit)
_device.VulkanDevice.wait = timed("wait", wait)
_plan.Plan.run_blocking = timed("run_blocking", _plan.Plan.run_blocking)


async def main(d, loops):
    global SPIN
    d = Path(d)
    meta = json.loads((d / "meta.json").read_text())
    net = Net()
    await net.load_param(str(d / "model.param"))
    await net.load_model(str(d / "model.bin"))
    x = np.load(d / "input.npy")

    async def once():
        ex = net.create_extractor()
        ex.input(meta["input"], x)
        return await ex.extract(meta["output"])

    for _ in range(5):
        await once()
    out = {"model": d.name}
    for rnd in range(2):
        for mode in ("block", "spin", "direct"):
            SPIN = mode == "spin"
            acc.clear()
            tot = []
            if mode == "direct":  # run_blocking on this thread: no asyncio, no hops
                plan = next(iter(net.gpu_model.plans.plans.values()))[0]
                ex = net.create_extractor()
                ex.input(meta["input"], x)
                inputs = dict(ex._inputs)
                for _ in range(loops):
                    t = time.perf_counter()
                    plan.run_blocking(inputs)
                    tot.append(time.perf_counter() - t)
            else:
                for _ in range(loops):
                    t = time.perf_counter()
                    await once()
                    tot.append(time.perf_counter() - t)
            r = {"total": round(statistics.median(tot) * 1e3, 3)}
            for k, v in acc.items():
                r[k] = round(statistics.median(v) * 1e3 * (len(v) / loops), 3)
            out[f"{mode}{rnd}"] = r
    print(json.dumps(out))


asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30))
