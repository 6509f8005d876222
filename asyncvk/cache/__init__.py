"""The pipeline cache: live pipelines, SPIR-V entries, the driver blob, and cache files."""

from ._digest import builtin_digest as builtin_digest
from ._digest import spirv_digest as spirv_digest
from ._keys import SpirvKey as SpirvKey
from ._pipeline_cache import BuildRecord as BuildRecord
from ._pipeline_cache import CacheStatistics as CacheStatistics
from ._pipeline_cache import Pipeline as Pipeline
from ._pipeline_cache import PipelineCache as PipelineCache
from ._spec import PipelineSpec as PipelineSpec

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
