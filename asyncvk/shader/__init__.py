"""Shaders: the builtin registry, in-process GLSL compilation and SPIR-V reflection."""

from ._compiler import OptimizationLevel as OptimizationLevel
from ._compiler import TargetEnv as TargetEnv
from ._compiler import compile_glsl as compile_glsl
from ._compiler import prepare_compiler as prepare_compiler
from ._options import ShaderOptions as ShaderOptions
from ._reflect import Binding as Binding
from ._reflect import ShaderInfo as ShaderInfo
from ._reflect import reflect_spirv as reflect_spirv
from ._registry import ShaderRegistry as ShaderRegistry
from ._registry import builtin_shaders as builtin_shaders

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
