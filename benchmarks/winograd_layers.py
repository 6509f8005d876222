"""Per-layer device time of every 3x3 stride-1 convolution with the direct shader the device
would otherwise run (``convolution_tiled.comp`` on CPU devices) and with the three Winograd
F(4x4, 3x3) passes, both in this one process.

    python benchmarks/winograd_layers.py [--runs 3] MODEL_DIR [MODEL_DIR ...] > FILE.json

Each folder holds model.param, model.bin, input.npy (and meta.json for suite models). Every
run uses the dispatch profiler (a timestamp around each dispatch); a layer's time is the sum
of its dispatches, the median over ``--runs`` extractions. The rule in
``asyncvk/layers/_conv_shaders.py`` (``winograd``) was read off this on lavapipe.
"""

import argparse
import asyncio
import json
import statistics
from pathlib import Path
from typing import Any

from conv_shaders import convolution_times

from asyncvk.gpu import ShaderChoices
from asyncvk.gpu._shader_choices import Place


async def profile(d: Path, winograd: Place, runs: int) -> dict[str, dict[str, Any]]:
    """Every eligible Convolution's median ms in model folder ``d`` with the Winograd choice
    ``winograd`` ("always" or "never")."""
    choices = ShaderChoices(conv_winograd=winograd)
    # the first run compiles (llvmpipe) and is left out
    types = ("Convolution", "ConvolutionDepthWise")
    times = await convolution_times(d, runs + 1, types, choices)
    out: dict[str, dict[str, Any]] = {}
    for name, ts in times.ms.items():
        layer = times.layer(name)
        eligible = (
            layer.kernel_w == layer.kernel_h == 3
            and layer.stride_w == layer.stride_h == 1
            and layer.dilation_w == layer.dilation_h == 1
            and layer.group == 1
            and not layer.int8_requested
        )
        if eligible:
            out[name] = {
                "ms": statistics.median(ts[1:]),
                "in_c": layer.taps // layer.maxk,
                "out": times.output(name),
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    report = {}
    for d in args.models:
        direct = asyncio.run(profile(d, "never", args.runs))
        winograd = asyncio.run(profile(d, "always", args.runs))
        report[d.name] = [
            {
                "layer": name,
                "in_c": row["in_c"],
                "out": row["out"],
                "direct_ms": round(row["ms"], 3),
                "winograd_ms": round(winograd[name]["ms"], 3),
            }
            for name, row in direct.items()
        ]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
