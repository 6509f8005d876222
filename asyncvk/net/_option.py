"""Option: how a Net loads and runs (ncnn's ``Option``, with the cache settings added)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

from ..gpu._shader_choices import ShaderChoices
from ..shader._options import ShaderOptions

if TYPE_CHECKING:
    from ..cache._pipeline_cache import PipelineCache


@dataclass
class Option:
    """Settings read at ``load_model`` time.

    ``use_vulkan_compute`` defaults to on when a Vulkan device exists (resolved at load).
    ``pipeline_cache`` shares one PipelineCache between Nets; without it each Net owns one.
    ``use_fp16_storage`` stores blobs and weights as float16: half the memory, outputs within
    1.3e-3 (relative L2) of PyTorch's on the test models. It is off by default because it is
    not faster: unlike ncnn, whose fp16 paths are its fastest, asyncvk's shaders compute in
    fp32, and fp16 storage took 0.99x-1.32x fp32's latency on an H200. Use it for memory.
    ``use_fp16_arithmetic`` (off by default) runs the large convolutions on the GPU's matrix
    units, fp16 operands and fp32 sums: 15-20% off vgg16, resnet50, googlenet and resnet18 on
    an H100 (docs/benchmarks.md), nothing on small models.
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

    ``prepare_compiler`` sets the GLSL compiler up on a thread at ``load_param`` when the load
    may compile (no SPIR-V cached, the install's incomplete), so that its first compile does not
    wait; False leaves it to the first compile, or to the caller (``Net.prepare_compiler()``,
    once a cache file is attached).

    ``shader_choices`` replaces the device's choice among layers' alternative shaders (a
    ``ShaderChoices`` from ``asyncvk.gpu``): for tests, and for benchmarks that compare them.

    Every field is checked when the Option is made: a wrong type raises TypeError, an
    impossible value or combination (``cache_dir`` without ``graph_key``) ValueError, each
    naming the field.

    Example::

        opt = asyncvk.Option(use_fp16_storage=True, cache_dir="~/.cache/asyncvk", graph_key="m")
        net = asyncvk.Net(opt)
    """

    use_vulkan_compute: bool | None = None
    vulkan_device: int | None = None
    use_fp16_storage: bool = False
    use_fp16_arithmetic: bool = False
    use_shape_hints: bool = False
    #: which shaders layers record with, in place of the device's (None: the device's)
    shader_choices: ShaderChoices | None = None
    num_compile_threads: int | None = None
    prepare_compiler: bool = True
    max_plans_per_shape: int = 4
    idle_plans_per_shape: int = 1
    #: plans of each batch size over one (``net.run`` with a batch axis, the server's batches)
    #: kept once idle: 0 gives a burst's batch memory back (a server started with
    #: ``--warm-up-batches`` keeps 1, the plans it recorded before ready)
    idle_batch_plans: int = 0
    plan_idle_seconds: float = 2.0
    max_waiting_per_shape: int | None = None
    pipeline_cache: PipelineCache | None = None
    cache_dir: str | Path | None = None
    graph_key: str | None = None
    autosave_interval: float = 2.0
    remote_cache: str | None = field(default=None, repr=False)  # a URL may hold a password
    #: a secret: not in the repr
    remote_cache_key: str | bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.check()

    def __repr__(self) -> str:
        """The fields set away from their defaults (a remote URL and its key shown as set)."""
        changed = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value == f.default:
                continue
            changed.append(f"{f.name}={value!r}" if f.repr else f"{f.name}=<set>")
        return f"Option({', '.join(changed)})"

    def check(self) -> None:
        """Raise TypeError or ValueError, naming the field, for a setting that cannot work."""
        for name in (
            "use_fp16_storage",
            "use_fp16_arithmetic",
            "use_shape_hints",
            "prepare_compiler",
        ):
            _need(name, getattr(self, name), bool)
        _need("use_vulkan_compute", self.use_vulkan_compute, bool, optional=True)
        _need("shader_choices", self.shader_choices, ShaderChoices, optional=True)
        _at_least("vulkan_device", self.vulkan_device, 0, optional=True)
        _at_least("num_compile_threads", self.num_compile_threads, 1, optional=True)
        _at_least("max_plans_per_shape", self.max_plans_per_shape, 1)
        _at_least("idle_plans_per_shape", self.idle_plans_per_shape, 0)
        _at_least("idle_batch_plans", self.idle_batch_plans, 0)
        if self.idle_batch_plans > self.max_plans_per_shape:
            raise ValueError(
                f"Option.idle_batch_plans ({self.idle_batch_plans}) is more than "
                f"max_plans_per_shape ({self.max_plans_per_shape})"
            )
        _at_least("max_waiting_per_shape", self.max_waiting_per_shape, 0, optional=True)
        if self.idle_plans_per_shape > self.max_plans_per_shape:
            raise ValueError(
                f"Option.idle_plans_per_shape ({self.idle_plans_per_shape}) is more than "
                f"max_plans_per_shape ({self.max_plans_per_shape})"
            )
        for name in ("plan_idle_seconds", "autosave_interval"):
            value = getattr(self, name)
            _need(name, value, (int, float))
            if not value >= 0:
                raise ValueError(f"Option.{name} must be 0 or more seconds, got {value!r}")
        _need("cache_dir", self.cache_dir, (str, Path), optional=True)
        _need("graph_key", self.graph_key, str, optional=True)
        if (self.cache_dir is None) != (self.graph_key is None):
            given = "cache_dir" if self.graph_key is None else "graph_key"
            raise ValueError(
                f"Option.{given} needs the other: a cache folder is named by cache_dir and "
                "graph_key together (as --cache-dir and --graph-key)"
            )
        _need("remote_cache", self.remote_cache, str, optional=True)
        _need("remote_cache_key", self.remote_cache_key, (str, bytes), optional=True)
        cache = self.pipeline_cache
        if cache is not None and not callable(getattr(cache, "request_many", None)):
            raise TypeError(
                f"Option.pipeline_cache must be a PipelineCache, got {type(cache).__name__}"
            )

    def shader_options(self) -> ShaderOptions:
        """The fields that change generated code, as the shaders' option bits see them."""
        return ShaderOptions(
            use_fp16_storage=self.use_fp16_storage,
            use_fp16_arithmetic=self.use_fp16_arithmetic,
        )


def _need(
    name: str, value: object, kind: type | tuple[type, ...], *, optional: bool = False
) -> None:
    if value is None and optional:
        return
    if (isinstance(value, bool) and kind in (int, float, (int, float))) or not isinstance(
        value, kind
    ):
        kinds = kind if isinstance(kind, tuple) else (kind,)
        wanted = " or ".join(k.__name__ for k in kinds) + (" or None" if optional else "")
        raise TypeError(f"Option.{name} must be {wanted}, got {value!r}")


def _at_least(name: str, value: object, least: int, *, optional: bool = False) -> None:
    _need(name, value, int, optional=optional)
    if isinstance(value, int) and value < least:
        raise ValueError(f"Option.{name} must be at least {least}, got {value}")
