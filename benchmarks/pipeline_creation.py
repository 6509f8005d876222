"""Time to build N distinct pipelines, GLSL compile included: one at a time vs the pool.

    python benchmarks/pipeline_creation.py [--pipelines N] [--threads T] [--device I]

Each pipeline has its own generated shader (so each pays a GLSL compile, a SPIR-V reflection
and a vkCreateComputePipelines), built through a fresh PipelineCache twice in one process:
``max_workers=1`` (serial, what ncnn does) and ``max_workers=T``. Prints one JSON object.
Set MESA_SHADER_CACHE_DISABLE=true / __GL_SHADER_DISK_CACHE=0 to keep driver disk caches out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from asyncvk.cache import PipelineCache, PipelineSpec
from asyncvk.gpu import get_gpu_device, get_gpu_info
from asyncvk.shader import ShaderRegistry

TEMPLATE = """#version 450
// generated benchmark shader {index}
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;
layout(constant_id = 0) const float k = 1.0;
layout(binding = 0) readonly buffer A {{ sfp a[]; }};
layout(binding = 1) writeonly buffer B {{ sfp b[]; }};
layout(push_constant) uniform P {{ int n; }} p;
float f(float x) {{
{body}
    return x;
}}
void main() {{
    int i = int(gl_GlobalInvocationID.x);
    if (i >= p.n) return;
    b[i] = sfp(f(float(a[i])) * k + {index}.0);
}}
"""


def write_shaders(directory: Path, count: int, salt: str) -> list[str]:
    names = []
    for i in range(count):
        body = "\n".join(
            f"    x = x * {1 + (i + j) % 7}.0 + sin(x + {j}.0) * cos(x * {j % 5}.0 + {i}.0);"
            for j in range(24)
        )
        name = f"bench_{salt}_{i}"
        (directory / f"{name}.comp").write_text(TEMPLATE.format(index=i, body=body))
        names.append(name)
    return names


async def build_all(cache: PipelineCache, names: list[str]) -> float:
    start = time.perf_counter()
    await cache.get_many(
        [PipelineSpec(n, specializations=(2.0,), local_size=(64, 1, 1)) for n in names]
    )
    return time.perf_counter() - start


def measure(device_index: int | None, count: int, threads: int) -> dict[str, object]:
    device = get_gpu_device(device_index)
    results: dict[str, float] = {}
    stats: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # A warm-up so one-time driver/compiler initialisation is not charged to either run.
        warm_dir = Path(tmp, "warm")
        warm_dir.mkdir()
        warm = write_shaders(warm_dir, 2, "warm")
        with PipelineCache(device, registry=ShaderRegistry(warm_dir)) as cache:
            asyncio.run(build_all(cache, warm))
        for label, workers in (("serial", 1), ("pooled", threads)):
            # Fresh shaders per run: nothing cached by the driver from the other run.
            run_dir = Path(tmp, label)
            run_dir.mkdir()
            names = write_shaders(run_dir, count, label)
            with PipelineCache(
                device, max_workers=workers, registry=ShaderRegistry(run_dir)
            ) as cache:
                results[label] = asyncio.run(build_all(cache, names))
                s = cache.statistics()
                stats[label] = {
                    "spirv_compiles": s.spirv_compiles,
                    "pipelines_created": s.pipelines_created,
                    "glsl_seconds": round(s.glsl_seconds, 4),
                    "create_seconds": round(s.create_seconds, 4),
                }
    info = get_gpu_info(device.index)
    return {
        "device": info.device_name,
        "driver": f"{info.driver_name} {info.driver_info}".strip(),
        "cpu_count": os.cpu_count(),
        "pipelines": count,
        "threads": threads,
        "serial_s": round(results["serial"], 4),
        "pooled_s": round(results["pooled"], 4),
        "speedup": round(results["serial"] / results["pooled"], 2),
        "serial_ms_per_pipeline": round(1000 * results["serial"] / count, 3),
        "pooled_ms_per_pipeline": round(1000 * results["pooled"] / count, 3),
        "stats": stats,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipelines", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--device", type=int, default=None)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.device, args.pipelines, args.threads), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
