"""Option checks its fields when it is made: a wrong type or an impossible combination raises
at once, naming the field, instead of doing nothing or failing later inside a load."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_runner import cli

from asyncvk import Option


@pytest.mark.parametrize(
    ("fields", "error", "says"),
    [
        ({"use_fp16_storage": "yes"}, TypeError, "Option.use_fp16_storage must be bool"),
        ({"use_vulkan_compute": 1}, TypeError, "Option.use_vulkan_compute must be bool or None"),
        ({"vulkan_device": -1}, ValueError, "Option.vulkan_device must be at least 0"),
        ({"vulkan_device": "0"}, TypeError, "Option.vulkan_device must be int or None"),
        ({"num_compile_threads": 0}, ValueError, "Option.num_compile_threads must be at least 1"),
        ({"max_plans_per_shape": True}, TypeError, "Option.max_plans_per_shape must be int"),
        ({"max_plans_per_shape": 2, "idle_plans_per_shape": 3}, ValueError, "is more than"),
        ({"plan_idle_seconds": -1}, ValueError, "Option.plan_idle_seconds must be 0 or more"),
        ({"cache_dir": "/tmp/cache"}, ValueError, "Option.cache_dir needs the other"),
        ({"graph_key": "model"}, ValueError, "Option.graph_key needs the other"),
        ({"pipeline_cache": "cache.vkcache"}, TypeError, "must be a PipelineCache"),
        ({"remote_cache_key": 42}, TypeError, "Option.remote_cache_key must be str or bytes"),
        ({"prepare_compiler": None}, TypeError, "Option.prepare_compiler must be bool"),
    ],
)
def test_a_setting_that_cannot_work_is_refused_when_made(
    fields: dict[str, Any], error: type[Exception], says: str
) -> None:
    with pytest.raises(error, match=says):
        Option(**fields)


def test_settings_that_work_are_kept() -> None:
    opt = Option(cache_dir=Path("/tmp/c"), graph_key="m", use_fp16_storage=True, vulkan_device=0)
    assert opt.graph_key == "m" and opt.use_fp16_storage and opt.vulkan_device == 0
    assert Option(plan_idle_seconds=0, autosave_interval=0.5).plan_idle_seconds == 0


def test_the_cli_refuses_a_cache_folder_without_a_key_the_same_way(tmp_path: Path) -> None:
    models = Path(__file__).parent / "models" / "cunet"
    proc = cli("run", str(models / "model.param"), str(models / "model.bin"), "--cache-dir", "x")
    assert proc.returncode == 1 and "--cache-dir and --graph-key go together" in proc.stderr


def test_shader_choices_are_checked_when_made() -> None:
    from asyncvk.gpu import ShaderChoices

    with pytest.raises(ValueError, match=r"ShaderChoices.conv_tiled must be one of .*'sometimes'"):
        ShaderChoices(conv_tiled="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="depthwise_flat_columns must be 4 or 8, got 6"):
        ShaderChoices(depthwise_flat_columns=6)
    with pytest.raises(ValueError, match="gemm_most_splits must be at least 1"):
        ShaderChoices(gemm_most_splits=0)
    with pytest.raises(TypeError, match="shader_choices"):
        Option(shader_choices={"conv_tiled": "never"})  # type: ignore[arg-type]
    assert Option(shader_choices=ShaderChoices(conv_tiled="never")).shader_choices is not None


COMPILER_AFTER_LOAD_PARAM = """
import asyncio, sys
from asyncvk import Net, Option

async def main():
    net = Net(Option(use_vulkan_compute=True, prepare_compiler=sys.argv[1] == "on"))
    await net.load_param("tests/models/cunet/model.param")
    after_param = "asyncvk.shader._compiler" in sys.modules
    net.prepare_compiler()
    print(after_param, "asyncvk.shader._compiler" in sys.modules)

asyncio.run(main())
"""


@pytest.mark.parametrize(("setting", "at_load_param"), [("on", True), ("off", False)])
def test_prepare_compiler_decides_whether_load_param_sets_the_compiler_up(
    setting: str, at_load_param: bool
) -> None:
    """With the install's SPIR-V off every load may compile: load_param sets the compiler up
    unless told not to, and ``Net.prepare_compiler()`` does it whenever the caller asks."""
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, ASYNCVK_PACKAGED_SPIRV="0", ASYNCVK_REMOTE_CACHE="")
    proc = subprocess.run(
        [sys.executable, "-c", COMPILER_AFTER_LOAD_PARAM, setting],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(at_load_param), "True"]
