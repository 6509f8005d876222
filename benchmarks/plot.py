"""Draw ``docs/benchmarks.png`` from the committed JSON results (needs matplotlib).

python benchmarks/plot.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
SERIES = [
    ("ncnn_cold", "ncnn cold"),
    ("asyncvk_cold", "asyncvk cold"),
    ("asyncvk_warm", "asyncvk warm (cache file)"),
]


def main() -> int:
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for ax, (name, title) in zip(
        axes,
        [
            ("cold_start_h100.json", "NVIDIA H100"),
            ("cold_start_lavapipe.json", "lavapipe, 2 cores"),
        ],
        strict=True,
    ):
        data = json.loads((RESULTS / name).read_text())
        models = [m["model"] for m in data["models"]]
        width = 0.27
        for i, (key, label) in enumerate(SERIES):
            values = [m[key].get("first_output_s") or 0 for m in data["models"]]
            ax.bar([x + (i - 1) * width for x in range(len(models))], values, width, label=label)
        ax.set_xticks(range(len(models)), models, rotation=20)
        ax.set_ylabel("process start to first output (s)")
        ax.set_title(f"{title}: median of {data['runs']} fresh processes")
        ax.legend(fontsize=8)
    fig.tight_layout()
    out = ROOT / "docs" / "benchmarks.png"
    fig.savefig(out, dpi=110)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
