"""``GET /metrics``: the server's, each model's and the plans' counters in Prometheus text
format, each family with its ``# HELP`` and ``# TYPE``."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from ..cache._remote_state import metric_lines as remote_metric_lines
from ..net._net import Net
from ..net._net_group import NetGroup
from ._oip import MODELS_KEY, REPOSITORY_KEY
from ._repository import ServedModel
from ._state import BUCKETS, NET_KEY, STATE_KEY

HELP = {
    "asyncvk_requests_total": "HTTP inference requests answered, by status code",
    "asyncvk_request_duration_seconds": "time from a request's arrival to its answer",
    "asyncvk_client_disconnects_total": "clients gone before their request body arrived",
    "asyncvk_model_requests_total": "requests that reached the model's batcher",
    "asyncvk_model_inferences_total": "items inferred (a request of N items counts N)",
    "asyncvk_model_failures_total": "requests whose batch failed",
    "asyncvk_model_refused_total": "requests refused: the model's queue was full (503)",
    "asyncvk_model_dropped_total": "requests dropped before the GPU: their client went away",
    "asyncvk_model_batches_total": "batches run: one GPU submission per segment each",
    "asyncvk_model_queue_seconds_total": "time requests waited before their batch started",
    "asyncvk_model_compute_seconds_total": "time batches took, from start to outputs",
    "asyncvk_model_batch_size": "batches by their number of items",
    "asyncvk_model_queue_waiting": "requests waiting in the model's queue now",
    "asyncvk_model_batches_running": "batches of the model on the GPU now",
    "asyncvk_model_ready": "1 once the model is loaded",
    "asyncvk_model_load_seconds": "time the model took to load (and warm up)",
    "asyncvk_model_warm_up_seconds": "time the model's warm-up inference took",
    "asyncvk_model_load_warm": "1 when the model's cache folder was warm",
    "asyncvk_plans": "plans (working memory) made and not released",
    "asyncvk_plans_lent": "plans in use by an inference",
    "asyncvk_plans_waiting": "inferences waiting for a plan",
    "asyncvk_plans_peak": "the most plans one request kind has held at once",
    "asyncvk_plans_built_total": "plans made",
    "asyncvk_plans_renewed_total": "plans recorded again with adopted pipelines",
    "asyncvk_plans_released_total": "plans released",
    "asyncvk_device_memory_reserved_bytes": "device memory the allocator holds",
    "asyncvk_device_memory_used_bytes": "device memory in use",
    "asyncvk_pipeline_cache_live_hits": "pipelines found live in the cache",
    "asyncvk_spirv_compiles": "shaders compiled from GLSL",
    "asyncvk_spirv_packaged": "shaders taken from the install's SPIR-V",
    "asyncvk_spirv_cache_hits": "shaders taken from a cache file",
    "asyncvk_pipelines_created": "Vulkan pipelines created",
    "asyncvk_ready": "1 once every model is loaded",
    "asyncvk_device_batches_running": "batches on this device now (--devices)",
    "asyncvk_device_batches_total": "batches this device answered",
    "asyncvk_device_batch_seconds": "a moving mean of this device's batch times",
    "asyncvk_device_taken_out": "1 once a failure took this device out",
}


def with_help(lines: list[str]) -> list[str]:
    """``lines`` with a ``# HELP`` line before each ``# TYPE`` line."""
    out = []
    for line in lines:
        if line.startswith("# TYPE "):
            name = line.split()[2]
            text = HELP.get(name, name.removeprefix("asyncvk_").replace("_", " "))
            out.append(f"# HELP {name} {text}")
        out.append(line)
    return out


async def metrics(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    models = request.app[MODELS_KEY]
    lines = ["# TYPE asyncvk_requests_total counter"]
    for code, count in sorted(state.codes.items()):
        lines.append(f'asyncvk_requests_total{{code="{code}"}} {count}')
    lines.append("# TYPE asyncvk_request_duration_seconds histogram")
    for bound, count in zip(BUCKETS, state.buckets, strict=True):
        lines.append(f'asyncvk_request_duration_seconds_bucket{{le="{bound}"}} {count}')
    lines.append(f'asyncvk_request_duration_seconds_bucket{{le="+Inf"}} {state.latency_count}')
    lines.append(f"asyncvk_request_duration_seconds_sum {state.latency_sum:.6f}")
    lines.append(f"asyncvk_request_duration_seconds_count {state.latency_count}")
    lines.append("# TYPE asyncvk_client_disconnects_total counter")
    lines.append(f"asyncvk_client_disconnects_total {state.disconnects}")
    lines += _model_lines(list(models.values()))
    lines += _device_lines(list(models.values()))
    net = next(iter(models.values())).net if models else request.app[NET_KEY]
    lines += _plan_lines(net)
    cache = request.app[REPOSITORY_KEY].cache or net.cache
    if cache is not None:
        s = cache.statistics()
        for name, value in (
            ("pipeline_cache_live_hits", s.live_hits),
            ("spirv_compiles", s.spirv_compiles),
            ("spirv_packaged", s.spirv_packaged),
            ("spirv_cache_hits", s.spirv_hits),
            ("pipelines_created", s.pipelines_created),
        ):
            lines.append(f"# TYPE asyncvk_{name} counter")
            lines.append(f"asyncvk_{name} {value}")
    lines += remote_metric_lines(net.remote_status)
    warm = 1 if net.cache_status and net.cache_status.get("loaded") else 0
    lines += [
        "# TYPE asyncvk_model_load_seconds gauge",
        f"asyncvk_model_load_seconds {state.load_seconds:.6f}",
        "# TYPE asyncvk_model_warm_up_seconds gauge",
        f"asyncvk_model_warm_up_seconds {state.warm_up_seconds:.6f}",
        "# TYPE asyncvk_model_load_warm gauge",
        f"asyncvk_model_load_warm {warm}",
        "# TYPE asyncvk_ready gauge",
        f"asyncvk_ready {int(state.ready)}",
    ]
    return web.Response(
        body=("\n".join(with_help(lines)) + "\n").encode(),
        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
    )


def _device_lines(models: list[ServedModel]) -> list[str]:
    """Each device of the models served on several (``--devices``): its load, what it has
    answered, and whether it was taken out, labelled by model, device index and member."""
    members = [
        (m.name, s) for m in models if isinstance(m.runner, NetGroup) for s in m.runner.statistics()
    ]
    if not members:
        return []
    lines: list[str] = []
    for name, kind, value in (
        ("asyncvk_device_batches_running", "gauge", lambda s: s.in_flight),
        ("asyncvk_device_batches_total", "counter", lambda s: s.runs_done),
        ("asyncvk_device_batch_seconds", "gauge", lambda s: f"{s.mean_run_s or 0.0:.6f}"),
        ("asyncvk_device_taken_out", "gauge", lambda s: int(s.taken_out)),
    ):
        lines.append(f"# TYPE {name} {kind}")
        for model, s in members:
            labels = f'model="{model}",device="{s.device}",member="{s.position}"'
            lines.append(f"{name}{{{labels}}} {value(s)}")
    return lines


def _model_lines(models: list[ServedModel]) -> list[str]:
    """Each model's batcher: requests, queue time, batch sizes and compute time, by label."""
    lines: list[str] = []

    def family(name: str, kind: str, value: Any) -> None:
        lines.append(f"# TYPE {name} {kind}")
        for m in models:
            lines.append(f'{name}{{model="{m.name}"}} {value(m)}')

    def stats(m: ServedModel) -> Any:
        return m.batcher.statistics

    family("asyncvk_model_requests_total", "counter", lambda m: stats(m).requests)
    family("asyncvk_model_inferences_total", "counter", lambda m: stats(m).items)
    family("asyncvk_model_failures_total", "counter", lambda m: stats(m).failed)
    family("asyncvk_model_refused_total", "counter", lambda m: stats(m).refused)
    family("asyncvk_model_dropped_total", "counter", lambda m: stats(m).dropped)
    family("asyncvk_model_batches_total", "counter", lambda m: stats(m).batches)
    family(
        "asyncvk_model_queue_seconds_total", "counter", lambda m: f"{stats(m).queue_seconds:.6f}"
    )
    family(
        "asyncvk_model_compute_seconds_total",
        "counter",
        lambda m: f"{stats(m).compute_seconds:.6f}",
    )
    family("asyncvk_model_queue_waiting", "gauge", lambda m: m.batcher.waiting())
    family("asyncvk_model_batches_running", "gauge", lambda m: m.batcher.inflight())
    family("asyncvk_model_ready", "gauge", lambda m: int(m.ready))
    lines.append("# TYPE asyncvk_model_batch_size histogram")
    for m in models:
        sizes = stats(m).batch_sizes
        count = 0
        for bound in BATCH_BUCKETS:
            count = sum(n for size, n in sizes.items() if size <= bound)
            lines.append(
                f'asyncvk_model_batch_size_bucket{{model="{m.name}",le="{bound}"}} {count}'
            )
        total = sum(sizes.values())
        lines.append(f'asyncvk_model_batch_size_bucket{{model="{m.name}",le="+Inf"}} {total}')
        lines.append(f'asyncvk_model_batch_size_sum{{model="{m.name}"}} {stats(m).items}')
        lines.append(f'asyncvk_model_batch_size_count{{model="{m.name}"}} {total}')
    return lines


#: the batch size histogram's bounds
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


def _plan_lines(net: Net) -> list[str]:
    """The plan pool (working memory by input shape) and the device memory it lives in."""
    model = net.gpu_model
    if model is None:
        return []
    stats = model.plans.statistics()
    memory = model.device.allocator.stats()
    lines = []
    for name, kind, value in (
        ("plans", "gauge", stats.plans),
        ("plans_lent", "gauge", stats.lent),
        ("plans_waiting", "gauge", stats.waiting),
        ("plans_peak", "gauge", stats.peak_plans),
        ("plans_built_total", "counter", stats.built),
        ("plans_released_total", "counter", stats.released),
        ("plans_renewed_total", "counter", stats.renewed),
        ("device_memory_reserved_bytes", "gauge", memory["reserved_bytes"]),
        ("device_memory_used_bytes", "gauge", memory["used_bytes"]),
    ):
        lines += [f"# TYPE asyncvk_{name} {kind}", f"asyncvk_{name} {value}"]
    return lines
