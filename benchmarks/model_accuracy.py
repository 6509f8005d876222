"""Relative L2 error of every test model against PyTorch's output, on the default device and on
the CPU path, in one JSON object (for devices where pytest is not at hand, such as the H100).

    python benchmarks/model_accuracy.py [--fp16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

import numpy as np

from asyncvk import Net, Option, get_gpu_info

MODELS = Path(__file__).resolve().parent.parent / "tests" / "models"


async def error(d: Path, variant: str, opt: Option) -> float:
    async with Net(opt) as net:
        await net.load_param(d / f"{variant}.param")
        await net.load_model(d / f"{variant}.bin")
        await net.background_builds()  # time what the model settles on
        ex = net.create_extractor()
        ex.input("in0", np.load(d / "input.npy"))
        y = (await ex.extract("out0")).astype(np.float64)
    ref = np.load(d / "output.npy").astype(np.float64)
    return float(np.linalg.norm(y - ref) / np.linalg.norm(ref))


async def main(fp16: bool) -> dict[str, object]:
    out: dict[str, object] = {"device": get_gpu_info().device_name, "fp16_storage": fp16}
    for d in sorted(p for p in MODELS.iterdir() if p.is_dir()):
        meta = json.loads((d / "meta.json").read_text())
        for variant in meta["variants"]:
            gpu = await error(d, variant, Option(use_vulkan_compute=True, use_fp16_storage=fp16))
            cpu = await error(d, variant, Option(use_vulkan_compute=False))
            out[f"{d.name}/{variant}"] = {"gpu": gpu, "cpu": cpu}
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fp16", action="store_true")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.fp16)), indent=2))
    sys.exit(0)
