"""GLSL to SPIR-V in process, through the cffi shaderc extension built at install time.

The cffi call releases the GIL, so compiles in worker threads run in parallel. One shaderc
compiler object is shared: its compile entry point takes it as ``const`` (shaderc documents
that as safe without locking); options are per call.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Mapping
from enum import IntEnum
from typing import Any

from .._errors import ShaderCompileError
from ._options import BUILTIN_OPTIMIZATION, BUILTIN_TARGET_ENV, ShaderOptions, compilable_source

try:
    from . import _shaderc_cffi  # built at install time; Any to mypy (the package's __getattr__)
except ImportError as exc:  # pragma: no cover - a broken install
    raise ImportError(
        "asyncvk's GLSL compiler (its shaderc extension) is missing: the builtin shaders "
        "need it only where the install's SPIR-V lacks them, your own GLSL always. "
        "Install the wheel (pip install asyncvk-runtime), or build from source with "
        "libshaderc-dev, glslang-dev, spirv-tools and g++ present (tools/install.sh)"
    ) from exc

_ffi: Any = _shaderc_cffi.ffi
_lib: Any = _shaderc_cffi.lib
# cffi builds each function of ``lib`` at its first lookup, and two compile threads doing that at
# once can abort the process (python-cffi/cffi#271, see gpu/_realized_types.py): looked up here,
# at import, on one thread.
for _name in dir(_lib):
    getattr(_lib, _name)
del _name

_COMPUTE_SHADER_KIND = 2  # shaderc_glsl_compute_shader
_TARGET_ENV_VULKAN = 0  # shaderc_target_env_vulkan
_STATUS_NAMES = {
    1: "invalid stage",
    2: "compilation error",
    3: "internal error",
    4: "null result object",
    5: "invalid assembly",
    6: "validation error",
    7: "transformation error",
    8: "configuration error",
}


class OptimizationLevel(IntEnum):
    ZERO = 0
    SIZE = 1
    PERFORMANCE = 2


class TargetEnv(IntEnum):
    """Vulkan target environments, as shaderc encodes them."""

    VULKAN_1_0 = 1 << 22
    VULKAN_1_1 = (1 << 22) | (1 << 12)
    VULKAN_1_2 = (1 << 22) | (2 << 12)
    VULKAN_1_3 = (1 << 22) | (3 << 12)


_compiler_lock = threading.Lock()
_compiler: Any = None


def _get_compiler() -> Any:
    global _compiler
    if _compiler is None:
        with _compiler_lock:
            if _compiler is None:
                compiler = _lib.shaderc_compiler_initialize()
                if compiler == _ffi.NULL:
                    raise RuntimeError("shaderc_compiler_initialize failed")
                _compiler = compiler
    return _compiler


_WARM_UP_SOURCE = "#version 450\nlayout(local_size_x = 1) in;\nvoid main() {}\n"
_warm_up: threading.Thread | None = None
_warm_up_lock = threading.Lock()


def prepare_compiler() -> threading.Thread:
    """Start the compiler's one-time set-up on a background thread; later calls start nothing.
    Returns that thread (join it to wait for the set-up).

    A process's first compile takes about 80 ms whatever the shader (glslang parses its table of
    built-in declarations once), and every concurrent compile waits for it. Started while the
    device opens, it is off a cold load's critical path. The thread holds no GIL while compiling.
    """
    global _warm_up
    with _warm_up_lock:
        if _warm_up is not None:
            return _warm_up
        _warm_up = threading.Thread(
            target=compile_glsl,
            args=(_WARM_UP_SOURCE, "warm_up.comp"),
            name="asyncvk-compiler-warm-up",
            daemon=True,
        )
        _warm_up.start()
        # A process that exits at once (a bad argument) must not tear down glslang's statics
        # while the thread is still inside it.
        atexit.register(_warm_up.join, 10.0)
        return _warm_up


def compile_glsl(
    source: str,
    name: str = "shader.comp",
    *,
    defines: Mapping[str, str] | None = None,
    optimization: OptimizationLevel = OptimizationLevel.PERFORMANCE,
    target_env: TargetEnv = TargetEnv.VULKAN_1_1,
) -> bytes:
    """Compile a GLSL compute shader to SPIR-V bytes.

    Raises ShaderCompileError carrying ``name`` and the compiler log (with ``name:line:``
    positions) when the source does not compile.
    """
    compiler = _get_compiler()
    options = _lib.shaderc_compile_options_initialize()
    if options == _ffi.NULL:
        raise RuntimeError("shaderc_compile_options_initialize failed")
    result = _ffi.NULL
    try:
        for key, value in (defines or {}).items():
            k = key.encode()
            v = str(value).encode()
            _lib.shaderc_compile_options_add_macro_definition(options, k, len(k), v, len(v))
        _lib.shaderc_compile_options_set_optimization_level(options, int(optimization))
        _lib.shaderc_compile_options_set_target_env(options, _TARGET_ENV_VULKAN, int(target_env))
        text = source.encode()
        result = _lib.shaderc_compile_into_spv(
            compiler, text, len(text), _COMPUTE_SHADER_KIND, name.encode(), b"main", options
        )
        status = _lib.shaderc_result_get_compilation_status(result)
        if status != 0:
            message = _ffi.string(_lib.shaderc_result_get_error_message(result)).decode(
                "utf-8", "replace"
            )
            log = message.strip() or _STATUS_NAMES.get(status, f"status {status}")
            raise ShaderCompileError(name, log)
        size = _lib.shaderc_result_get_length(result)
        return bytes(_ffi.buffer(_lib.shaderc_result_get_bytes(result), size))
    finally:
        if result != _ffi.NULL:
            _lib.shaderc_result_release(result)
        _lib.shaderc_compile_options_release(options)


def compile_builtin(
    name: str, source: str, options: ShaderOptions, defines: Mapping[str, str] | None = None
) -> bytes:
    """A builtin shader's SPIR-V under ``options``: the one way a load and the install's
    packaged folder compile it (same text, target and optimisation)."""
    return compile_glsl(
        compilable_source(source, options),
        f"{name}.comp",
        defines=defines,
        optimization=OptimizationLevel(BUILTIN_OPTIMIZATION),
        target_env=TargetEnv(BUILTIN_TARGET_ENV),
    )
