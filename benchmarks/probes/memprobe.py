import vulkan as vk
from asyncvk.gpu import get_gpu_device
d = get_gpu_device()
p = d.memory_properties
for i in range(p.memoryTypeCount):
    t = p.memoryTypes[i]; print("type", i, hex(t.propertyFlags), "heap", t.heapIndex)
for h in range(p.memoryHeapCount):
    print("heap", h, p.memoryHeaps[h].size >> 20, "MiB", hex(p.memoryHeaps[h].flags))
print("device_is_host_visible", d.allocator.device_is_host_visible, d.allocator._types)
