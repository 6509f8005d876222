"""Per-layer GPU time of every Convolution with each GPU shader: one output per invocation,
split-K and implicit GEMM.

    python benchmarks/conv_shaders.py MODEL_DIR [MODEL_DIR ...] > FILE.json

Each folder holds model.param, model.bin, input.npy (and meta.json for suite models). Every run
uses the dispatch profiler (a timestamp around each dispatch), median of 8 extractions; the
output lists, per model and layer, kernel size, taps per output (in_c * kernel area), output
channels and shape, ``ms`` (convolution.comp), ``splitk_ms`` (convolution_splitk.comp) and
``gemm_ms`` (convolution_gemm.comp; null where the layer is grouped). The rules in
``asyncvk/layers/_conv_shaders.py`` were read off this, on the H100
(``results/splitk_layers_h100.json``, ``results/conv_shaders_h100.json``).
"""

import asyncio
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from _common import blob_names

from asyncvk import Net, Option
from asyncvk.gpu import ShaderChoices
from asyncvk.layers import convolution
from asyncvk.net._dispatch_profile import ProfilingExtractor
from asyncvk.net._graph import GraphNode


@dataclass
class LayerTimes:
    """Each convolution's device ms per profiled extraction, with what describes it."""

    ms: dict[str, list[float]]
    nodes: dict[str, GraphNode]
    shapes: dict[int, tuple[int, ...]]

    def layer(self, name: str) -> convolution.Convolution:
        layer = self.nodes[name].layer
        assert isinstance(layer, convolution.Convolution)
        return layer

    def output(self, name: str) -> tuple[int, ...] | None:
        return self.shapes.get(self.nodes[name].tops[0])


async def convolution_times(
    d: Path, runs: int, types: tuple[str, ...], choices: ShaderChoices | None = None
) -> LayerTimes:
    """Model folder ``d`` loaded with ``choices`` (None: the device's), its background
    pipelines adopted, then ``runs`` extractions with the dispatch profiler: each layer of
    ``types`` timed as the sum of its dispatches (a split GEMM is two, Winograd three)."""
    in_name, out_name = blob_names(d)
    x = np.load(d / "input.npy")
    async with Net(Option(shader_choices=choices)) as net:
        await net.load_param(d / "model.param")
        await net.load_model(d / "model.bin")
        await net.background_builds()  # time what the model settles on
        assert net.graph is not None
        nodes = {n.layer.name: n for n in net.graph.nodes}
        times: dict[str, list[float]] = {}
        async with ProfilingExtractor(net) as ex:
            for _ in range(runs):
                ex.input(in_name, x)
                await ex.extract(out_name)
                assert ex.profile is not None
                per_layer: dict[str, float] = {}
                for t in ex.profile.dispatches:
                    if t.layer_type in types:
                        per_layer[t.layer] = per_layer.get(t.layer, 0.0) + t.gpu_ms
                for name, ms in per_layer.items():
                    times.setdefault(name, []).append(ms)
            plan = next(iter(ex._plans.values()))
            return LayerTimes(times, nodes, dict(plan.shapes))


async def profile(d: Path, shader: str) -> dict[str, dict[str, Any]]:
    """Every Convolution's median GPU ms in model folder ``d`` with ``shader`` ("one",
    "splitk" or "gemm") forced wherever it applies."""
    choices = ShaderChoices(
        conv_splitk="always" if shader == "splitk" else "never",
        conv_gemm="always" if shader == "gemm" else "never",
    )
    times = await convolution_times(d, 8, ("Convolution",), choices)
    out: dict[str, dict[str, Any]] = {}
    for name, ts in times.ms.items():
        layer = times.layer(name)
        out[name] = {
            "ms": statistics.median(ts),
            "k": layer.kernel_w,
            "taps": layer.taps,
            "group": layer.group,
            "out": times.output(name),
        }
    return out


def main() -> None:
    report = {}
    for d in map(Path, sys.argv[1:]):
        one, split, gemm = (asyncio.run(profile(d, s)) for s in ("one", "splitk", "gemm"))
        report[d.name] = [
            {
                "layer": k,
                **one[k],
                "splitk_ms": split.get(k, {}).get("ms"),
                "gemm_ms": gemm.get(k, {}).get("ms"),
            }
            for k in one
        ]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
