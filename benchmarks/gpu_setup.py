"""Where a fresh process's GPU setup goes: Vulkan loader + driver load (vkCreateInstance),
device enumeration and queries, vkCreateDevice, and asyncvk's own device object.

    python benchmarks/gpu_setup.py          # JSON on stdout, one fresh process per sample

Each sample runs in a fresh interpreter, since every step is a once-per-process cost.

``--features`` instead compares vkCreateDevice with no optional features enabled against every
supported feature enabled, one fresh process per sample, alternating.
"""

from __future__ import annotations

import json
import os
import statistics
import sys

from _common import run_child

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


DEVICE_CHILD = r"""
import json, sys, time, itertools
import vulkan as vk
ffi = vk.ffi
mode = sys.argv[1]
app = vk.VkApplicationInfo(pApplicationName="probe", apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))
inst = vk.vkCreateInstance(vk.VkInstanceCreateInfo(pApplicationInfo=app), None)
pd = vk.vkEnumeratePhysicalDevices(inst)[0]
family = next(i for i, q in enumerate(vk.vkGetPhysicalDeviceQueueFamilyProperties(pd))
              if q.queueFlags & vk.VK_QUEUE_COMPUTE_BIT)
feats2 = ffi.new("VkPhysicalDeviceFeatures2*")
feats2.sType = vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2
f11 = ffi.new("VkPhysicalDeviceVulkan11Features*")
f11.sType = vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES
f12 = ffi.new("VkPhysicalDeviceVulkan12Features*")
f12.sType = vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES
f13 = ffi.new("VkPhysicalDeviceVulkan13Features*")
f13.sType = vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES
feats2.pNext = f11; f11.pNext = f12; f12.pNext = f13
vk.lib.vkGetPhysicalDeviceFeatures2(pd, feats2)
if mode == "none":
    for s in (f11, f12, f13):
        nxt, st = s.pNext, s.sType
        ffi.memmove(s, bytes(ffi.sizeof(s[0])), ffi.sizeof(s[0]))
        s.pNext, s.sType = nxt, st
    ffi.memmove(ffi.addressof(feats2.features), bytes(ffi.sizeof("VkPhysicalDeviceFeatures")),
                ffi.sizeof("VkPhysicalDeviceFeatures"))
priority = ffi.new("float[1]", [1.0])
qinfo = ffi.new("VkDeviceQueueCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
    "queueFamilyIndex": family, "queueCount": 1, "pQueuePriorities": priority})
create = ffi.new("VkDeviceCreateInfo*", {"sType": vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
    "pNext": feats2, "queueCreateInfoCount": 1, "pQueueCreateInfos": qinfo})
out = ffi.new("VkDevice*")
t0 = time.perf_counter()
rc = vk.lib.vkCreateDevice(pd, create, ffi.NULL, out)
t1 = time.perf_counter()
assert rc == 0, rc
vk.lib.vkDestroyDevice(out[0], ffi.NULL)
print(json.dumps({"mode": mode, "create_device_s": t1 - t0}))
"""


def features(samples: int) -> int:
    """vkCreateDevice time with no optional features against all supported ones."""
    runs: dict[str, list[float]] = {"none": [], "all": []}
    for _ in range(samples):
        for mode in runs:
            runs[mode].append(run_child(DEVICE_CHILD, mode)["create_device_s"])
    medians = {
        f"create_device_{m}_features_s": round(statistics.median(v), 4) for m, v in runs.items()
    }
    print(json.dumps({"samples": samples, "median": medians, "runs": runs}, indent=2))
    return 0


def main() -> int:
    if "--features" in sys.argv[1:]:
        return features(int(os.environ.get("SAMPLES", "5")))
    samples = [run_child(CHILD) for _ in range(int(os.environ.get("SAMPLES", "5")))]
    keys = [k for k in samples[0] if k.endswith("_s")]
    medians = {k: round(statistics.median(s[k] for s in samples), 4) for k in keys}
    print(json.dumps({"samples": len(samples), "median": medians}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
