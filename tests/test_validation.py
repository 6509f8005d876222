"""Under the Khronos validation layer: no errors, and no Vulkan object left when a device closes
(the layer reports every child object still alive at vkDestroyDevice)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = """
import asyncio, numpy as np
from asyncvk import Net, Option, PipelineCache
from asyncvk.gpu import VulkanDevice, validation_messages
from asyncvk.gpu._instance import instance
assert instance().validation and instance().messenger is not None, "layer not enabled"
device = VulkanDevice(0)
cache = PipelineCache(device)
for i in range(4):
    cache.get_pipeline_sync("scale_add", specializations=(float(i), 0))
cache.clear()

async def run():
    net = Net(Option(pipeline_cache=cache))
    await net.load_param("tests/models/cunet/model.param")
    await net.load_model("tests/models/cunet/model.bin")
    ex = net.create_extractor()
    ex.input("in0", np.load("tests/models/cunet/input.npy"))
    await ex.extract("out0")
    await net.aclose()

asyncio.run(run())
cache.close()
device.close()
messages = validation_messages()
print("MESSAGES", len(messages))
for m in messages[:10]:
    print(m)
"""


def test_no_validation_errors_and_no_leaked_objects() -> None:
    root = Path(__file__).resolve().parent.parent
    layers = [Path(p) for p in ("/usr/share/vulkan/explicit_layer.d",)]
    if not any(p.glob("VkLayer_khronos_validation.json") for p in layers if p.is_dir()):
        pytest.skip("vulkan-validationlayers is not installed")
    env = dict(os.environ, ASYNCVK_VALIDATION="1")
    proc = subprocess.run(
        [sys.executable, "-c", CHILD],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MESSAGES 0" in proc.stdout, proc.stdout
