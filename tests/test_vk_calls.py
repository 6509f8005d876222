"""Every Vulkan call goes through ``asyncvk._vk``'s checked wrapper and fails as our own error."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from asyncvk import DeviceLostError, GpuTimeoutError, OutOfDeviceMemoryError, VulkanError
from asyncvk.gpu import VulkanDevice, get_default_gpu_index, get_gpu_count
from asyncvk.gpu._device import DEFAULT_FENCE_TIMEOUT_S, fence_timeout_from_env

PACKAGE = Path(__file__).resolve().parent.parent / "asyncvk"
_VULKAN_FUNCTION = re.compile(r"^vk[A-Z]")
_WRAPPERS = {"checked", "api"}
#: (module, function) called around the wrappers on purpose: the driver's early load through
#: ctypes, before the binding is imported, whose result the instance's own calls check again
_DELIBERATE = {("asyncvk/gpu/_driver_load.py", "vkEnumerateInstanceExtensionProperties")}


def _direct_vulkan_uses(path: Path) -> list[str]:
    """``lib.vkX``/``vk.vkX``/``import vulkan`` in one module: every use not through a wrapper."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Attribute) and _VULKAN_FUNCTION.match(node.attr):
            base = node.value
            name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
            where = str(path.relative_to(PACKAGE.parent))
            if name not in _WRAPPERS and (where, node.attr) not in _DELIBERATE:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.attr}")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                modules.append(node.module or "")
            if any(m == "vulkan" or m.startswith("vulkan.") for m in modules):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: import vulkan")
    return found


def test_no_module_but_vk_calls_the_binding_directly() -> None:
    modules = [p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "_vk.py"]
    assert len(modules) > 20
    direct = [use for path in modules for use in _direct_vulkan_uses(path)]
    assert not direct, "Vulkan called around asyncvk._vk.checked/api:\n" + "\n".join(direct)


needs_vulkan = pytest.mark.skipif(get_gpu_count() == 0, reason="no Vulkan device")


@needs_vulkan
def test_an_absurd_allocation_is_out_of_device_memory_and_leaves_nothing(
    device: VulkanDevice,
) -> None:
    before = (device.live_handles(), device.allocator.stats())
    with pytest.raises(OutOfDeviceMemoryError) as raised:
        device.allocate(1 << 50)
    error = raised.value
    assert isinstance(error, MemoryError) and isinstance(error, VulkanError)
    assert error.call in {"vkCreateBuffer", "vkAllocateMemory"}
    assert error.name == "VK_ERROR_OUT_OF_DEVICE_MEMORY" and error.result == -2
    assert error.call in str(error) and "VK_ERROR_OUT_OF_DEVICE_MEMORY" in str(error)
    assert (device.live_handles(), device.allocator.stats()) == before


@needs_vulkan
def test_a_fence_wait_over_its_limit_is_a_timeout_and_the_fence_is_not_lost() -> None:
    device = VulkanDevice(get_default_gpu_index())
    try:
        device.fence_timeout_s = 0.01
        fence = device._fence()  # never submitted: it cannot signal
        with pytest.raises(GpuTimeoutError) as raised:
            device.wait(fence)
        assert not isinstance(raised.value, DeviceLostError)
        assert isinstance(raised.value, TimeoutError)
        assert "vkWaitForFences" in str(raised.value) and raised.value.seconds == 0.01
        assert device.live_handles() == {"fence": 1}
        other = device._fence()
        assert other is not fence  # maybe still pending: never handed out again
        device._recycle(other)
    finally:
        device.close()
    assert device.live_handles() == {}


def test_fence_timeout_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ASYNCVK_FENCE_TIMEOUT_S", raising=False)
    assert fence_timeout_from_env() == DEFAULT_FENCE_TIMEOUT_S >= 600
    monkeypatch.setenv("ASYNCVK_FENCE_TIMEOUT_S", "1.5")
    assert fence_timeout_from_env() == 1.5
    for bad in ("0", "-3", "soon", "inf", "nan"):
        monkeypatch.setenv("ASYNCVK_FENCE_TIMEOUT_S", bad)
        with pytest.raises(ValueError, match="ASYNCVK_FENCE_TIMEOUT_S"):
            fence_timeout_from_env()
