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


def cold_start(name: str) -> str:
    """Process start to first output and to exit, per model: ncnn cold, asyncvk cold and warm,
    then where asyncvk's cold process spends it (from its own clock marks)."""
    data = _load(name)
    if data is None:
        return ""
    rows = [
        "| model | ncnn cold | asyncvk cold | asyncvk warm | exit cold / warm "
        "| cold: imports done / device open / load_param / load_model / first inference ms "
        "| warm load_model ms |",
        "|---|---|---|---|---|---|---|",
    ]

    def s(row: dict[str, Any], key: str) -> str:
        v = row.get(key)
        return "-" if v is None else f"{v:.3f} s"

    def ms(row: dict[str, Any], key: str) -> str:
        v = row.get(key)
        return "-" if v is None else f"{v * 1000:.0f}"

    for m in data["models"]:
        n, c, w = (m.get(k, {}) for k in ("ncnn_cold", "asyncvk_cold", "asyncvk_warm"))
        if c.get("first_output_s") is None:
            why = (c.get("errors") or ["-"])[0].split(": ")[-1]
            rows.append(f"| {m['model']} | {s(n, 'first_output_s')} | not run: {why} | | | | |")
            continue
        rows.append(
            f"| {m['model']} | {s(n, 'first_output_s')} "
            f"| {s(c, 'first_output_s')} (**{c.get('speedup_vs_ncnn_cold', '-')}x**) "
            f"| {s(w, 'first_output_s')} (**{w.get('speedup_vs_ncnn_cold', '-')}x**) "
            f"| {s(c, 'wall_s')} / {s(w, 'wall_s')} "
            f"| {ms(c, 'kernel_imports_done_s')} / {ms(c, 'kernel_device_opened_s')} / "
            f"{ms(c, 'load_param_s')} / {ms(c, 'load_model_s')} / {ms(c, 'infer_s')} "
            f"| {ms(w, 'load_model_s')} |"
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


def _by_level(name: str) -> dict[str, dict[int, Any]]:
    data = _load(name)
    by_level: dict[str, dict[int, Any]] = {}
    for m in (data or {}).get("models", []):
        by_level.setdefault(m["model"], {})[m["glsl_opt"]] = m
    return by_level


def load_profile(device: str) -> str:
    """Cold load_model phases, the last pipeline build, and the -O0 / -O2 comparison."""
    current = _by_level(f"load_profile_{device}.json")
    levels = _by_level(f"load_profile_glsl_opt_{device}.json")
    rows = [
        "| model | load_model cold | reading weights | last pipeline ready | its GLSL / driver "
        "| first inference (plan build) | -O0 / -O2: load_model, warm latency |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, by in current.items():
        o2 = by.get(2)
        if o2 is None:
            continue
        med = o2["median"]
        last = max(o2["builds"], key=lambda b: b["end_ms"])
        zero, two = levels.get(name, {}).get(0), levels.get(name, {}).get(2)
        compare = (
            f"{zero['median']['load_model_ms']:.0f} / {two['median']['load_model_ms']:.0f} ms, "
            f"{zero['median']['latency_ms']:.2f} / {two['median']['latency_ms']:.2f} ms"
            if zero and two
            else "-"
        )
        rows.append(
            f"| {name} | {med['load_model_ms']:.0f} ms | {med['read_weights_ms']:.0f} ms "
            f"| {med['critical_ms']:.0f} ms | {last['glsl_ms']:.0f} / {last['create_ms']:.0f} ms "
            f"| {med['infer_ms']:.0f} ms ({med.get('plan_build_ms', 0):.0f} ms) | {compare} |"
        )
    return "\n".join(rows)


def dispatch_warmup() -> str:
    data = _load("dispatch_warmup_lavapipe.json")
    if data is None:
        return ""
    rows = [
        "| model | pipelines | first inference | warm-up, waited / then first inference "
        "| warm-up + first: waited / not waited, against none | second inference |",
        "|---|---|---|---|---|---|",
    ]
    for m in data["models"]:
        none, wait = m["none"], m["wait"]
        rows.append(
            f"| {m['model']} | {m['pipelines']} | {none['first_ms']:.0f} ms "
            f"| {wait['warmup_ms']:.0f} / {wait['first_ms']:.0f} ms "
            f"| {m['wait_total_over_none']}x / {m['async_total_over_none']}x "
            f"| {none['second_ms']:.0f} ms |"
        )
    return "\n".join(rows)


def compile_threads() -> str:
    h100, lvp = _load("compile_threads_h100.json"), _load("compile_threads_lavapipe.json")
    if h100 is None:
        return ""
    threads = h100["threads"]
    rows = [
        "| model | pipelines | "
        + " | ".join(f"{t} thr" for t in threads)
        + " | 1 -> 16 | lavapipe 1 / 2 thr |",
        "|---" * (len(threads) + 4) + "|",
    ]
    by_name = {m["model"]: m for m in (lvp or {}).get("models", [])}
    for m in h100["models"]:
        ms = [f"{m[f'threads_{t}']['load_model_s'] * 1000:.0f}" for t in threads]
        lv = by_name.get(m["model"])
        lav = (
            f"{lv['threads_1']['load_model_s'] * 1000:.0f} / "
            f"{lv['threads_2']['load_model_s'] * 1000:.0f}"
            if lv
            else "-"
        )
        rows.append(
            f"| {m['model']} | {m['threads_1']['pipelines_created']} | "
            + " | ".join(ms)
            + f" | {m['speedup']}x | {lav} |"
        )
    return "\n".join(rows)


def shape_hints() -> str:
    h100, lvp = _load("shape_hints_h100.json"), _load("shape_hints_lavapipe.json")
    rows = [
        "| model | pipelines generic / hinted | H100 latency hinted / generic "
        "| H100 load_model hinted / generic | lavapipe latency hinted / generic |",
        "|---|---|---|---|---|",
    ]
    by_name = {m["model"]: m for m in (lvp or {}).get("models", [])}
    for m in (h100 or {}).get("models", []):
        r = m["hinted_over_generic"]
        lv = by_name.get(m["model"], {}).get("hinted_over_generic", {})
        rows.append(
            f"| {m['model']} | {m['generic']['pipelines_created']} / "
            f"{m['hinted']['pipelines_created']} | {r['median_ms']} | {r['load_model_s']} "
            f"| {lv.get('median_ms', '-')} |"
        )
    return "\n".join(rows)


if __name__ == "__main__":
    for name in ("cold_start_h100.json", "cold_start_suite_h100.json", "cold_start_lavapipe.json"):
        print(f"{name}\n\n{cold_start(name)}\n")
    print("\n" + latency())
    print("\n" + load_profile("h100"))
    print("\n" + compile_threads())
    print("\n" + dispatch_warmup())
    print("\n" + shape_hints())
