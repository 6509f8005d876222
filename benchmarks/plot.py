"""Draw ``docs/benchmarks.png`` from the committed JSON results (needs matplotlib).

python benchmarks/plot.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
#: (label, the key of a result row that holds it)
SERIES = [
    ("ncnn cold", "ncnn_cold"),
    ("asyncvk cold", "asyncvk_cold"),
    ("asyncvk warm (cache file)", "asyncvk_warm"),
]
#: panel title -> the JSON files whose model rows it draws, in order
PANELS = {
    "NVIDIA H100, tests/models, median of 3 fresh processes": ["cold_start_tests_h100.json"],
    "NVIDIA H100, ncnn's benchmark models, 1 fresh process each": ["cold_start_suite_h100.json"],
}


def _seconds(row: dict[str, Any], key: str) -> float:
    return float((row.get(key) or {}).get("first_output_s") or 0)


def main() -> int:
    fig, axes = plt.subplots(2, 1, figsize=(14, 8.5))
    for ax, (title, files) in zip(axes, PANELS.items(), strict=True):
        rows = [m for name in files for m in json.loads((RESULTS / name).read_text())["models"]]
        models = [m["model"] for m in rows]
        width = 0.27
        for i, (label, key) in enumerate(SERIES):
            values = [_seconds(m, key) for m in rows]
            ax.bar([x + (i - 1) * width for x in range(len(models))], values, width, label=label)
        ax.set_xticks(range(len(models)), models, rotation=35, ha="right", fontsize=8)
        ax.set_ylabel("process start to\nfirst output (s)")
        ax.set_title(title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out = ROOT / "docs" / "benchmarks.png"
    fig.savefig(out, dpi=100)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
