"""Markdown tables for docs/benchmarks.md from the JSON in benchmarks/results/.

python benchmarks/tables.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def _load(name: str) -> dict[str, Any] | None:
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else None


def cold_start(device: str) -> str:
    data = _load(f"cold_start_{device}.json")
    if data is None:
        return ""
    rows = [
        "| model | ncnn cold | asyncvk cold | asyncvk warm file | warm process "
        "| GPU setup / load_model cold / warm / first inference ms "
        "| pipelines / GLSL cold / warm |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in data["models"]:
        n, c, w, p = (
            m[k] for k in ("ncnn_cold", "asyncvk_cold", "asyncvk_warm_file", "asyncvk_warm_process")
        )

        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v * 1000:.0f}"

        rows.append(
            f"| {m['model']} | {n['ttfr_s']:.2f} s | {c['ttfr_s']:.3f} s "
            f"(**{c['speedup_vs_ncnn_cold']}x**) | {w['ttfr_s']:.3f} s "
            f"(**{w['speedup_vs_ncnn_cold']}x**) | {p['ttfr_s']:.3f} s "
            f"| {ms(w.get('gpu_setup_s'))} / {ms(c['load_model_s'])} / {ms(w['load_model_s'])} "
            f"/ {ms(w.get('infer_s'))} "
            f"| {c['pipelines_created']} / {c['spirv_compiled']} / {w['spirv_compiled']} |"
        )
    return "\n".join(rows)


def latency() -> str:
    h100, lvp = _load("latency_h100.json"), _load("latency_lavapipe.json")
    rows = [
        "| model | H100 ncnn | H100 asyncvk | ratio | H100 tiled conv | H100 fp16 "
        "| lavapipe ncnn | lavapipe asyncvk | ratio | lavapipe one-output conv |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    by_name = {m["model"]: m for m in (lvp or {}).get("models", [])}
    for m in (h100 or {}).get("models", []):
        lv = by_name.get(m["model"], {})

        def med(row: dict[str, Any], key: str) -> str:
            v = row.get(key, {}).get("median_ms")
            return "-" if v is None else f"{v:.2f}"

        rows.append(
            f"| {m['model']} | {med(m, 'ncnn')} | {med(m, 'asyncvk')} "
            f"| {m.get('asyncvk_over_ncnn', '-')} | {med(m, 'asyncvk_tiled_conv_always')} "
            f"| {med(m, 'asyncvk_fp16')} | {med(lv, 'ncnn')} | {med(lv, 'asyncvk')} "
            f"| {lv.get('asyncvk_over_ncnn', '-')} | {med(lv, 'asyncvk_tiled_conv_never')} |"
        )
    return "\n".join(rows)


def load_profile(device: str) -> str:
    data = _load(f"load_profile_{device}.json")
    if data is None:
        return ""
    rows = [
        "| model | load_model cold | reading weights | last pipeline ready | its GLSL / driver "
        "| pipelines | -O0: load_model / warm latency | -O2: warm latency |",
        "|---|---|---|---|---|---|---|---|",
    ]
    by_level: dict[str, dict[int, Any]] = {}
    for m in data["models"]:
        by_level.setdefault(m["model"], {})[m["glsl_opt"]] = m
    for name, levels in by_level.items():
        o2, o0 = levels.get(2), levels.get(0)
        if o2 is None:
            continue
        med = o2["median"]
        last = max(o2["builds"], key=lambda b: b["end_ms"])
        zero = (
            f"{o0['median']['load_model_ms']:.0f} ms / {o0['median']['latency_ms']:.2f} ms"
            if o0
            else "-"
        )
        rows.append(
            f"| {name} | {med['load_model_ms']:.0f} ms | {med['read_weights_ms']:.0f} ms "
            f"| {med['critical_ms']:.0f} ms | {last['glsl_ms']:.0f} / {last['create_ms']:.0f} ms "
            f"| {len(o2['builds'])} | {zero} | {med['latency_ms']:.2f} ms |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    print("H100\n\n" + cold_start("h100") + "\n\nlavapipe\n\n" + cold_start("lavapipe"))
    print("\n" + latency())
    print("\n" + load_profile("h100"))
