"""The pipeline cache: live pipelines, SPIR-V entries, the driver blob, and cache files.

Names are imported on first use (PEP 562): the command line's first lines read the remote
cache's URL and decide on the compiler's early set-up (``_remote_url``, ``_early_setup``) on a
thread while the main thread imports numpy, which the cache itself needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

from .._lazy import lazy_attributes as _lazy_attributes

if _TYPE_CHECKING:
    from ._digest import builtin_digest as builtin_digest
    from ._digest import spirv_digest as spirv_digest
    from ._keys import SpirvKey as SpirvKey
    from ._pipeline_cache import BuildRecord as BuildRecord
    from ._pipeline_cache import CacheStatistics as CacheStatistics
    from ._pipeline_cache import Pipeline as Pipeline
    from ._pipeline_cache import PipelineCache as PipelineCache
    from ._spec import PipelineSpec as PipelineSpec

#: public name -> the module that defines it, imported when the name is first read
_LAZY: dict[str, str] = {
    "builtin_digest": "._digest",
    "spirv_digest": "._digest",
    "SpirvKey": "._keys",
    "BuildRecord": "._pipeline_cache",
    "CacheStatistics": "._pipeline_cache",
    "Pipeline": "._pipeline_cache",
    "PipelineCache": "._pipeline_cache",
    "PipelineSpec": "._spec",
}

__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY, globals())

__all__ = (
    "BuildRecord",
    "CacheStatistics",
    "Pipeline",
    "PipelineCache",
    "PipelineSpec",
    "SpirvKey",
    "builtin_digest",
    "spirv_digest",
)
