"""Shaders: the builtin registry, in-process GLSL compilation and SPIR-V reflection.

The compiler's names are imported on first use (PEP 562): its cffi binding and the lookup of
every shaderc function (1.5 ms on lavapipe's machine) are for processes that compile, and a warm
load compiles nothing.
"""

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._lazy import lazy_attributes as _lazy_attributes
from ._options import ShaderOptions as ShaderOptions
from ._reflect import Binding as Binding
from ._reflect import ShaderInfo as ShaderInfo
from ._reflect import reflect_spirv as reflect_spirv
from ._registry import ShaderRegistry as ShaderRegistry
from ._registry import builtin_shaders as builtin_shaders

if _TYPE_CHECKING:
    from ._compiler import OptimizationLevel as OptimizationLevel
    from ._compiler import TargetEnv as TargetEnv
    from ._compiler import compile_glsl as compile_glsl
    from ._compiler import prepare_compiler as prepare_compiler

__getattr__, __dir__ = _lazy_attributes(
    __name__,
    {
        name: "._compiler"
        for name in ("OptimizationLevel", "TargetEnv", "compile_glsl", "prepare_compiler")
    },
    globals(),
)

__all__ = (
    "Binding",
    "OptimizationLevel",
    "ShaderInfo",
    "ShaderOptions",
    "ShaderRegistry",
    "TargetEnv",
    "builtin_shaders",
    "compile_glsl",
    "prepare_compiler",
    "reflect_spirv",
)
