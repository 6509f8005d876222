"""Shared fixtures: the lavapipe (or default) device, and a validation-layer check at the end."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from asyncvk.gpu import VulkanDevice, get_gpu_count, get_gpu_device, validation_messages

# Mesa's own disk cache would hide cold-start behaviour and grows without bound in CI.
os.environ.setdefault("MESA_SHADER_CACHE_DISABLE", "true")

needs_vulkan = pytest.mark.skipif(get_gpu_count() == 0, reason="no Vulkan device")


@pytest.fixture(scope="session")
def device() -> Iterator[VulkanDevice]:
    if get_gpu_count() == 0:
        pytest.skip("no Vulkan device (install mesa-vulkan-drivers)")
    yield get_gpu_device()


@pytest.fixture(autouse=True, scope="session")
def _no_validation_errors() -> Iterator[None]:
    """With ASYNCVK_VALIDATION=1 the whole session must leave the validation layer silent."""
    yield
    messages = validation_messages()
    assert not messages, "validation layer reported:\n" + "\n".join(messages[:20])
