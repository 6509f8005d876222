from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from asyncvk import ShaderCompileError
from asyncvk.shader import OptimizationLevel, TargetEnv, compile_glsl, reflect_spirv

GOOD = """#version 450
layout(local_size_x = 8) in;
layout(binding = 0) buffer B { float x[]; };
void main() { x[gl_GlobalInvocationID.x] = VALUE; }
"""


def test_compiles_to_spirv_with_macros() -> None:
    spirv = compile_glsl(GOOD, "good.comp", defines={"VALUE": "2.0"})
    assert spirv[:4] == bytes.fromhex("03022307")
    assert len(spirv) % 4 == 0


def test_missing_macro_is_a_compile_error_naming_the_shader_and_line() -> None:
    with pytest.raises(ShaderCompileError) as info:
        compile_glsl(GOOD, "good.comp")
    assert info.value.shader == "good.comp"
    assert "good.comp:4:" in info.value.log
    assert "VALUE" in info.value.log


def test_syntax_error_reports_line_numbers() -> None:
    source = "#version 450\nlayout(local_size_x = 1) in;\nvoid main() {\n  float x = ;\n}\n"
    with pytest.raises(ShaderCompileError, match=r"broken\.comp:4: error"):
        compile_glsl(source, "broken.comp")


@pytest.mark.parametrize("level", list(OptimizationLevel))
@pytest.mark.parametrize("env", list(TargetEnv))
def test_every_optimisation_level_and_target_env(level: OptimizationLevel, env: TargetEnv) -> None:
    spirv = compile_glsl(GOOD, defines={"VALUE": "1.0"}, optimization=level, target_env=env)
    version = int.from_bytes(spirv[4:8], "little")
    expected_minor = {
        TargetEnv.VULKAN_1_0: 0,
        TargetEnv.VULKAN_1_1: 3,
        TargetEnv.VULKAN_1_2: 5,
        TargetEnv.VULKAN_1_3: 6,
    }[env]
    assert (version >> 8) & 0xFF == expected_minor
    assert reflect_spirv(spirv).local_size == (8, 1, 1)


def test_compile_releases_the_gil() -> None:
    """A Python thread keeps running while another thread is inside shaderc.

    If the extension held the GIL, the counting thread could not advance during the compile.
    """
    big = GOOD.replace(
        "void main() {",
        "float f(float a) { "
        + " ".join(f"a = sin(a) * {i}.0 + cos(a);" for i in range(1500))
        + " return a; }\nvoid main() {",
    )
    counter = 0
    stop = threading.Event()

    def count() -> None:
        nonlocal counter
        while not stop.is_set():
            counter += 1

    thread = threading.Thread(target=count)
    thread.start()
    try:
        time.sleep(0.01)
        before = counter
        start = time.perf_counter()
        compile_glsl(big, defines={"VALUE": "f(1.0)"}, optimization=OptimizationLevel.ZERO)
        elapsed = time.perf_counter() - start
        during = counter - before
    finally:
        stop.set()
        thread.join()
    assert elapsed > 0.02, "the compile was too short to tell"
    assert during > 1000, f"only {during} increments during a {elapsed:.3f}s compile"


PREPARE_CHILD = r"""
import asyncio, sys
import asyncvk.shader._compiler as compiler
from asyncvk import Net, Option

param = sys.argv[1]
async def main():
    net = Net(Option(use_vulkan_compute=False))
    await net.load_param(param)
    print("cpu-only net started a warm-up:", compiler._warm_up is not None)
    net = Net(Option())
    await net.load_param(param)
    first = compiler._warm_up
    compiler.prepare_compiler()
    print("one thread:", first is not None and compiler._warm_up is first)
    first.join(60)
    print("finished:", not first.is_alive())
asyncio.run(main())
"""


def test_load_param_warms_the_compiler_once_and_only_for_vulkan(tmp_path: Path) -> None:
    # A fresh interpreter: the warm-up is once per process.
    param = tmp_path / "tiny.param"
    param.write_text("7767517\n2 2\nInput in0 0 1 in0\nReLU relu 1 1 in0 out0\n")
    out = subprocess.run(
        [sys.executable, "-c", PREPARE_CHILD, str(param)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [
        "cpu-only net started a warm-up: False",
        "one thread: True",
        "finished: True",
    ]
    # and a compile after the warm-up still works
    assert compile_glsl(GOOD, defines={"VALUE": "1.0"})[:4] == bytes.fromhex("03022307")
