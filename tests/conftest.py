"""Shared fixtures: the lavapipe (or default) device, a validation-layer check at the end, and the
device identities that tests which need no GPU write into cache files."""

from __future__ import annotations

import atexit
import dataclasses
import os
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from asyncvk.gpu import (
    DeviceIdentity,
    VulkanDevice,
    get_gpu_count,
    get_gpu_device,
    get_gpu_info,
    resolve_quirks,
    validation_messages,
)

# Mesa's own disk cache would hide cold-start behaviour and grows without bound in CI.
os.environ.setdefault("MESA_SHADER_CACHE_DISABLE", "true")
# The tests of compiling, counting compiles and caching compiled SPIR-V need shaders to compile:
# the install's SPIR-V folder is off here, and on in tests/test_packaged_spirv.py.
os.environ["ASYNCVK_PACKAGED_SPIRV"] = "0"
# The user's cache key (asyncvk/cache/_cache_key.py) lives under XDG_CONFIG_HOME: the suite
# makes its own, in a folder of its own, and never reads or creates the real user's.
_CONFIG_HOME = tempfile.mkdtemp(prefix="asyncvk-test-config-")
os.environ["XDG_CONFIG_HOME"] = _CONFIG_HOME
os.environ.pop("ASYNCVK_CACHE_KEY", None)
os.environ.pop("ASYNCVK_CACHE_KEY_FILE", None)
atexit.register(shutil.rmtree, _CONFIG_HOME, True)

needs_vulkan = pytest.mark.skipif(get_gpu_count() == 0, reason="no Vulkan device")

#: The GPU that cache files are written for in tests that need no GPU (plain values).
IDENTITY = DeviceIdentity(
    vendor_id=0x10DE,
    device_id=0x2330,
    api_version=(1 << 22) | (3 << 12) | 280,
    driver_version=0x8A1C0000,
    driver_id=4,
    device_name="NVIDIA H100 80GB HBM3",
    driver_name="NVIDIA",
    pipeline_cache_uuid=bytes(range(16)),
)
#: Another GPU and driver: a file written for it is of no use on IDENTITY.
OTHER_IDENTITY = DeviceIdentity(
    0x1002, 0x744C, 4206872, 8388711, 3, "AMD Radeon RX 7900 XTX", "radv", b"r" * 16
)


def identity_source(identity: DeviceIdentity = IDENTITY) -> str:
    """``identity`` as Python source, for the scripts that tests run in child processes."""
    return f"DeviceIdentity(*{dataclasses.astuple(identity)!r})"


@pytest.fixture
def identity() -> DeviceIdentity:
    return IDENTITY


@pytest.fixture(scope="session")
def device() -> Iterator[VulkanDevice]:
    if get_gpu_count() == 0:
        pytest.skip("no Vulkan device (install mesa-vulkan-drivers)")
    yield get_gpu_device()


@pytest.fixture
def staged() -> Iterator[VulkanDevice]:
    """A device of its own whose inputs go through staging buffers (a discrete GPU's path)."""
    if get_gpu_count() == 0:
        pytest.skip("no Vulkan device (install mesa-vulkan-drivers)")
    quirks = resolve_quirks(get_gpu_info(0).identity, "upload_through_staging")
    device = VulkanDevice(0, quirks=quirks)
    try:
        yield device
    finally:
        device.close()


@pytest.fixture(autouse=True, scope="session")
def _no_validation_errors() -> Iterator[None]:
    """With ASYNCVK_VALIDATION=1 the whole session must leave the validation layer silent."""
    yield
    messages = validation_messages()
    assert not messages, "validation layer reported:\n" + "\n".join(messages[:20])
