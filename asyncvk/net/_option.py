"""Option: how a Net loads and runs (ncnn's ``Option``, with the cache settings added)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..shader._options import ShaderOptions

if TYPE_CHECKING:
    from ..cache._pipeline_cache import PipelineCache


@dataclass
class Option:
    """Settings read at ``load_model`` time.

    ``use_vulkan_compute`` defaults to on when a Vulkan device exists (resolved at load).
    ``pipeline_cache`` shares one PipelineCache between Nets; without it each Net owns one.
    ``cache_dir`` + ``graph_key`` turn on the managed cache folder: saved after load, and again
    ``autosave_interval`` seconds after anything new is built in the cache (another Net sharing
    it loading a model), off the request path; ``aclose()`` flushes.
    ``remote_cache`` (a ``redis://host:port/db`` URL; None: ``ASYNCVK_REMOTE_CACHE``, "": none)
    adds a shared tier behind the local cache: what the local cache lacks is read from it at
    load, and what it lacks is pushed after load; ``remote_cache_key`` (None:
    ``ASYNCVK_REMOTE_CACHE_KEY``) signs what is written and accepts only values signed with it.

    Concurrent extractions of one input shape each need a plan (its own blob memory): at most
    ``max_plans_per_shape`` are made, and further extractions wait for one in arrival order (with
    ``max_waiting_per_shape``, one that finds that many waiting raises ``PlanQueueFull``). A plan
    idle for ``plan_idle_seconds`` is released, down to ``idle_plans_per_shape`` per shape, so
    the memory a burst took is given back.
    """

    use_vulkan_compute: bool | None = None
    vulkan_device: int | None = None
    use_fp16_storage: bool = False
    use_fp16_arithmetic: bool = False
    use_shape_hints: bool = False
    num_compile_threads: int | None = None
    max_plans_per_shape: int = 4
    idle_plans_per_shape: int = 1
    plan_idle_seconds: float = 2.0
    max_waiting_per_shape: int | None = None
    pipeline_cache: PipelineCache | None = None
    cache_dir: str | Path | None = None
    graph_key: str | None = None
    autosave_interval: float = 2.0
    remote_cache: str | None = field(default=None, repr=False)  # a URL may hold a password
    #: a secret: not in the repr
    remote_cache_key: str | bytes | None = field(default=None, repr=False)

    def shader_options(self) -> ShaderOptions:
        """The fields that change generated code, as the shaders' option bits see them."""
        return ShaderOptions(
            use_fp16_storage=self.use_fp16_storage,
            use_fp16_arithmetic=self.use_fp16_arithmetic,
        )
