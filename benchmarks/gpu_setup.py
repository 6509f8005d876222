"""Where a fresh process's GPU setup goes: Vulkan loader + driver load (vkCreateInstance),
device enumeration and queries, vkCreateDevice, and asyncvk's own device object.

    python benchmarks/gpu_setup.py          # JSON on stdout, one fresh process per sample

Each sample runs in a fresh interpreter, since every step is a once-per-process cost.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, time
t0 = time.perf_counter()
import vulkan as vk
t_import = time.perf_counter()
app = vk.VkApplicationInfo(pApplicationName="probe", apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))
inst = vk.vkCreateInstance(vk.VkInstanceCreateInfo(pApplicationInfo=app), None)
t_instance = time.perf_counter()
pds = vk.vkEnumeratePhysicalDevices(inst)
t_enum = time.perf_counter()
vk.vkDestroyInstance(inst, None)
t_destroy = time.perf_counter()
from asyncvk.gpu._instance import get_gpu_count
t_asyncvk_import = time.perf_counter()
n = get_gpu_count()
t_count = time.perf_counter()
from asyncvk.gpu._device import get_gpu_device
dev = get_gpu_device()
t_device = time.perf_counter()
print(json.dumps({
    "import_vulkan_s": t_import - t0,
    "raw_create_instance_s": t_instance - t_import,
    "raw_enumerate_s": t_enum - t_instance,
    "raw_destroy_instance_s": t_destroy - t_enum,
    "asyncvk_import_s": t_asyncvk_import - t_destroy,
    "asyncvk_instance_and_queries_s": t_count - t_asyncvk_import,
    "asyncvk_device_s": t_device - t_count,
    "devices": n,
}))
"""


def main() -> int:
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    samples = []
    for _ in range(int(os.environ.get("SAMPLES", "5"))):
        out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env)
        if out.returncode != 0:
            print(out.stderr[-2000:], file=sys.stderr)
            return 1
        samples.append(json.loads(out.stdout.strip().splitlines()[-1]))
    keys = [k for k in samples[0] if k.endswith("_s")]
    medians = {k: round(statistics.median(s[k] for s in samples), 4) for k in keys}
    print(json.dumps({"samples": len(samples), "median": medians}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
