"""Run every test model with the ``ncnn`` wheel and print its relative L2 error against PyTorch.

Proves the committed files are valid ncnn models and shows the accuracy floor ncnn itself
reaches. ``pip install ncnn``; prints one JSON object.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent / "tests" / "models"


def run(model_dir: Path, stem: str, vulkan: bool) -> float:
    import ncnn

    net = ncnn.Net()
    net.opt.use_vulkan_compute = vulkan
    net.load_param(str(model_dir / f"{stem}.param"))
    net.load_model(str(model_dir / f"{stem}.bin"))
    x = np.load(model_dir / "input.npy")
    expected = np.load(model_dir / "output.npy")
    ex = net.create_extractor()
    ex.input("in0", ncnn.Mat(np.ascontiguousarray(x)))
    _, out = ex.extract("out0")
    y = np.array(out).reshape(expected.shape)
    return float(np.linalg.norm(y - expected) / np.linalg.norm(expected))


def main() -> int:
    report: dict[str, dict[str, float]] = {}
    for model_dir in sorted(p for p in ROOT.iterdir() if p.is_dir()):
        meta = json.loads((model_dir / "meta.json").read_text())
        for stem in meta["variants"]:
            for vulkan in (False, True):
                key = f"{stem}/{'vulkan' if vulkan else 'cpu'}"
                report.setdefault(model_dir.name, {})[key] = run(model_dir, stem, vulkan)
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
