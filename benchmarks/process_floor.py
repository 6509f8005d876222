"""The floor under "process start to first output": what a Python process needs before it can
load any model on the GPU, timed on the user's clock (the kernel's start of the process).

    python benchmarks/process_floor.py [--processes 9] [--out FILE.json]

Every case runs in fresh interpreters, interleaved, with the drivers' disk caches off:

* ``pass``: the interpreter alone.
* ``numpy_asyncio``: ``import numpy, asyncio`` (what a numpy asyncio program imports first).
* ``device``: ``import vulkan``, ``vkCreateInstance``, ``vkCreateDevice`` (one queue).
* ``floor``: the best arrangement of the last two: the device opens on a thread while the main
  thread imports numpy and asyncio (the driver's calls let go of the GIL). No Python program that
  uses numpy, asyncio and this Vulkan binding can produce a GPU result before this ends.
* ``asyncvk_ready``: what ``asyncvk run`` does before it reads the model: asyncvk's device thread
  (``asyncvk.cli``'s) beside the main thread's imports, ``asyncvk.cli._runner`` included.

Each child also times a fixed pure-Python loop after its marks (``host_speed.py``'s), so a
report shows which of the host's speeds each process drew.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from _common import emit, run_child, spread

#: Seconds since the kernel started this process, as ``asyncvk.cli._process_clock`` reads them,
#: written out so that the pure cases import nothing of asyncvk.
_CLOCK = r"""
import os, time, json, threading
def _start():
    with open("/proc/self/stat", "rb") as f:
        stat = f.read()
    return int(stat[stat.rindex(b")") + 2 :].split()[19]) / os.sysconf("SC_CLK_TCK")
_START = _start()
def since():
    return time.clock_gettime(time.CLOCK_BOOTTIME) - _START
marks = {"main": since()}
"""

_OPEN_DEVICE = r"""
def open_device():
    import vulkan as vk
    app = vk.VkApplicationInfo(pApplicationName="floor", apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))
    inst = vk.vkCreateInstance(vk.VkInstanceCreateInfo(pApplicationInfo=app), None)
    pd = vk.vkEnumeratePhysicalDevices(inst)[0]
    qi = vk.VkDeviceQueueCreateInfo(queueFamilyIndex=0, queueCount=1, pQueuePriorities=[1.0])
    info = vk.VkDeviceCreateInfo(queueCreateInfoCount=1, pQueueCreateInfos=[qi])
    opened.append((inst, vk.vkCreateDevice(pd, info, None)))
    marks["device_opened"] = since()
opened = []
"""

_REPORT = r"""
marks["ready"] = since()
def _loop():
    total = 0
    for i in range(100_000):
        total += i * i
    return total
loops = []
for _ in range(15):
    t = time.perf_counter(); _loop(); loops.append((time.perf_counter() - t) * 1000)
marks["host_loop_ms"] = sorted(loops)[len(loops) // 2]
print(json.dumps(marks))
"""

CASES: dict[str, str] = {
    "pass": _CLOCK + _REPORT,
    "numpy_asyncio": _CLOCK + "import numpy, asyncio\nmarks['imports_done'] = since()\n" + _REPORT,
    "device": _CLOCK + _OPEN_DEVICE + "open_device()\n" + _REPORT,
    "floor": _CLOCK
    + _OPEN_DEVICE
    + "t = threading.Thread(target=open_device); t.start()\n"
    + "import numpy, asyncio\nmarks['imports_done'] = since()\nt.join()\n"
    + _REPORT,
    "asyncvk_ready": _CLOCK
    + "from asyncvk.cli import _main as cli\nfrom asyncvk.gpu import _driver_load\n"
    + "_driver_load.start()\n"
    + "threading.Thread(target=cli._open_device, args=(None,), daemon=True).start()\n"
    + "import numpy, asyncio, asyncvk.cli._runner\nmarks['imports_done'] = since()\n"
    + "from asyncvk.gpu._device import get_gpu_device\nget_gpu_device(None)\n"
    + "marks['device_opened'] = since()\n"
    + _REPORT,
}


def _child(code: str) -> dict[str, Any]:
    """A fresh process's marks, and the parent's wall time from its spawn to its exit."""
    t0 = time.perf_counter()
    marks = run_child(code, timeout=120)
    marks["parent_wall_s"] = time.perf_counter() - t0
    return marks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=9)
    ap.add_argument(
        "--cases", default=",".join(CASES), help="comma-separated, of " + ", ".join(CASES)
    )
    ap.add_argument("--out")
    args = ap.parse_args()
    names = [c for c in args.cases.split(",") if c]
    unknown = set(names) - set(CASES)
    if unknown:
        raise SystemExit(f"--cases: unknown {sorted(unknown)}")
    samples: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for _ in range(args.processes):  # interleaved, so a slow stretch of the host hits every case
        for name in names:
            samples[name].append(_child(CASES[name]))
    report = {
        "python": sys.version.split()[0],
        "processes": args.processes,
        "clock": "seconds from the kernel's start of the child (/proc/self/stat) to each mark",
        "cases": {n: {"summary": spread(s), "samples": s} for n, s in samples.items()},
    }
    emit(report, args.out)


if __name__ == "__main__":
    main()
