"""The tables and summary figures of docs/benchmarks.md, from the JSON in benchmarks/results/.

    python benchmarks/tables.py [SECTION ...]

With no argument every section is printed; a section is one of the names in ``SECTIONS``.
Each figure in the document comes from one of these files, so this is how it is checked.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
TEST_MODELS = ("cunet", "mobilenetv2", "resnet18", "rrdb", "shufflenetv2", "squeezenet")


def load(name: str) -> dict[str, Any]:
    return json.loads((RESULTS / name).read_text())


def table(header: Iterable[str], rows: Iterable[Iterable[Any]]) -> str:
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def span(values: Iterable[float], fmt: str = "{:.2f}") -> str:
    v = sorted(values)
    return f"{fmt.format(v[0])}-{fmt.format(v[-1])}"


def labelled(models: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """Model rows with the test models marked. A row says where it came from (``source``), or
    the file lists tests/models first, then the suite."""
    lead = 0
    while lead < len(models) and models[lead]["model"] in TEST_MODELS[lead:]:
        lead += 1
    out = []
    for i, m in enumerate(models):
        is_test = m["source"] == "tests/models" if "source" in m else i < lead
        out.append((f"{m['model']} (tests/models)" if is_test else m["model"], m))
    return out


def pipeline_creation() -> str:
    rows = []
    for name in (
        "pipeline_creation_64_h100.json",
        "pipeline_creation_256_h100.json",
        "pipeline_creation_64_lavapipe.json",
    ):
        d = load(name)
        device = "H100" if "H100" in d["device"] else f"lavapipe, {d['cpu_count']} cores"
        rows.append(
            (
                device,
                d["pipelines"],
                d["threads"],
                f"{d['serial_s']:.3f} s",
                f"{d['pooled_s']:.3f} s",
                f"**{d['speedup']}x**",
                f"`{name}`",
            )
        )
    return table(("device", "pipelines", "threads", "serial", "pool", "speed-up", "file"), rows)


def _first(c: dict[str, Any]) -> float:
    return c["first_output_s"]


def cold_start() -> str:
    """Process start to first output, every model, the H100 and lavapipe side by side."""
    h100 = {
        label: m
        for name in ("cold_start_tests_h100.json", "cold_start_suite_h100.json")
        for label, m in labelled(load(name)["models"])
    }
    rows = []
    for label, lv in labelled(load("cold_start_all_lavapipe.json")["models"]):
        h = h100[label]
        hn, hc, hw = h["ncnn_cold"], h["asyncvk_cold"], h["asyncvk_warm"]
        ln, lc, lw = lv["ncnn_cold"], lv["packaged_cold"], lv["packaged_warm"]
        rows.append(
            (
                label,
                f"{_first(hn):.2f} s",
                f"{_first(hc):.3f} / {_first(hw):.3f} s",
                f"**{hc['speedup_vs_ncnn_cold']:.1f}x**",
                f"{_first(ln):.2f} s",
                f"{_first(lc):.2f} / {_first(lw):.2f} s",
                f"**{lc['speedup_vs_ncnn_cold']:.1f}x**",
            )
        )
    return table(
        (
            "model",
            "H100: ncnn cold",
            "asyncvk cold / warm",
            "cold vs ncnn",
            "lavapipe: ncnn cold",
            "asyncvk cold / warm",
            "cold vs ncnn",
        ),
        rows,
    )


def _summary(label: str, rows: list[dict[str, Any]], cold: str, warm: str) -> str:
    ncnn = [_first(m["ncnn_cold"]) for m in rows]
    c = [_first(m[cold]) for m in rows]
    w = [_first(m[warm]) for m in rows]
    ratio = [m[cold]["speedup_vs_ncnn_cold"] for m in rows]
    wr = [m[warm]["speedup_vs_ncnn_cold"] for m in rows]
    gain = [(a - b) * 1000 for a, b in zip(c, w, strict=True)]
    first = f"asyncvk cold {span(c, '{:.3f}')} s, warm {span(w, '{:.3f}')} s"
    return (
        f"{label}: {len(rows)} models; ncnn cold {span(ncnn)} s; {first}; "
        f"cold vs ncnn {span(ratio)}x (median "
        f"{statistics.median(ratio):.1f}x, >=10x for {sum(r >= 10 for r in ratio)}, "
        f">=2x for {sum(r >= 2 for r in ratio)}); warm vs ncnn {span(wr)}x; warm earlier than "
        f"cold for {sum(g > 0 for g in gain)}, by {statistics.median(gain):.0f} ms as a median "
        f"({span(gain, '{:.0f}')} ms)"
    )


def cold_start_summary() -> str:
    tests = load("cold_start_tests_h100.json")["models"]
    suite = load("cold_start_suite_h100.json")["models"]
    lav = load("cold_start_all_lavapipe.json")["models"]
    lines = [
        _summary("H100 tests/models", tests, "asyncvk_cold", "asyncvk_warm"),
        _summary("H100 suite", suite, "asyncvk_cold", "asyncvk_warm"),
        _summary("H100 all", tests + suite, "asyncvk_cold", "asyncvk_warm"),
        _summary("lavapipe all", lav, "packaged_cold", "packaged_warm"),
        _summary("lavapipe all, compiled", lav, "compiled_cold", "compiled_warm"),
    ]
    return "\n".join(lines)


def packaged_spirv() -> str:
    """Shaders from the install's folder against the same code compiling them at load."""
    out = []
    for name in (
        "cold_start_packaged_spirv_tests_h100.json",
        "cold_start_packaged_spirv_suite_h100.json",
        "cold_start_all_lavapipe.json",
    ):
        d = load(name)
        rows = d["models"]
        first = [(_first(m["compiled_cold"]) - _first(m["packaged_cold"])) * 1000 for m in rows]
        lm = [
            (m["compiled_cold"]["load_model_s"] - m["packaged_cold"]["load_model_s"]) * 1000
            for m in rows
        ]
        glsl = [m["compiled_cold"]["spirv_compiled"] for m in rows]
        out.append(
            f"{name} ({d['runs']} processes a cell): first output earlier with the folder for "
            f"{sum(x > 0 for x in first)} of {len(rows)}, median {statistics.median(first):.0f} ms "
            f"({span(first, '{:.0f}')}); cold load_model shorter for {sum(x > 0 for x in lm)}, "
            f"median {statistics.median(lm):.0f} ms ({span(lm, '{:.0f}')}); shaders compiled "
            f"without it: {span(glsl, '{:.0f}')}, with it: "
            f"{span([m['packaged_cold']['spirv_compiled'] for m in rows], '{:.0f}')}"
        )
    return "\n".join(out)


def cold_load() -> str:
    """The cold process's own marks (kernel clock) and in-process phases, H100 test models."""
    rows = []
    for m in load("cold_start_tests_h100.json")["models"]:
        c, w = m["asyncvk_cold"], m["asyncvk_warm"]
        rows.append(
            (
                m["model"],
                f"{c['kernel_main_s'] * 1000:.0f}",
                f"{c['kernel_imports_done_s'] * 1000:.0f}",
                f"{c['kernel_device_opened_s'] * 1000:.0f}",
                f"{c['load_param_s'] * 1000:.0f}",
                f"{c['load_model_s'] * 1000:.0f} / {w['load_model_s'] * 1000:.0f}",
                f"{c['pipelines_created']}",
                f"{c['infer_s'] * 1000:.0f}",
                f"{c['kernel_first_output_s'] * 1000:.0f}",
                f"{c['kernel_exit_s'] * 1000:.0f}",
            )
        )
    return table(
        (
            "model",
            "`main()`",
            "imports done",
            "device open",
            "load_param",
            "load_model cold / warm",
            "pipelines",
            "first inference",
            "first output",
            "exit",
        ),
        rows,
    )


def process_floor() -> str:
    files = (
        "process_floor_h100.json",
        "process_floor_h100_second_host.json",
        "process_floor_lavapipe.json",
    )
    data = [load(f) for f in files]
    labels = {
        "pass": "nothing (`pass`)",
        "numpy_asyncio": "`import numpy, asyncio`",
        "device": "open the device (`import vulkan`, instance, device)",
        "floor": "**floor**: both, the device on a thread",
        "asyncvk_ready": "asyncvk ready to read the model",
    }
    rows = []
    for case, label in labels.items():
        cells = []
        for d in data:
            r = d["cases"][case]["summary"]["ready"]
            cells.append(f"{r['median']:.3f} ({r['min']:.3f}-{r['max']:.3f})")
        rows.append((label, *cells))
    loops = [
        span(
            [s for c in d["cases"].values() for s in (c["summary"]["host_loop_ms"]["min"],)]
            + [c["summary"]["host_loop_ms"]["max"] for c in d["cases"].values()],
            "{:.1f}",
        )
        for d in data
    ]
    rows.append(("host Python loop, ms (all cases)", *loops))
    head = [f"H100 ({data[0]['processes']} processes)"]
    head.append(f"H100, second host ({data[1]['processes']})")
    head.append(f"lavapipe machine ({data[2]['processes']})")
    return table(("what the process does", *head), rows)


def import_cost() -> str:
    s = load("import_cost_lavapipe.json")["summary"]

    def f(k: str, scale: float = 1000) -> str:
        return f"{s[k]['median'] * scale:.0f} ({s[k]['min'] * scale:.0f}-{s[k]['max'] * scale:.0f})"

    return (
        f"modules {s['modules']['median']}: {f('asyncvk_modules_s')} ms; "
        f"{s['dataclasses']['median']} dataclasses {f('dataclasses_s')} ms; "
        f"msgspec import {f('msgspec_import_s')} ms; 40 dataclasses {f('forty_dataclasses_s')} ms, "
        f"40 Structs {s['forty_structs_s']['min'] * 1000:.1f}-"
        f"{s['forty_structs_s']['max'] * 1000:.1f} ms"
    )


def latency() -> str:
    """Warm latency, every model, the H100 (with fp16 arithmetic) and lavapipe side by side."""
    vit = load("latency_vision_transformer_h100.json")["models"][0]["asyncvk"]
    lvp = dict(labelled(load("latency_all_lavapipe.json")["models"]))

    def ms(r: dict[str, Any], digits: int) -> str:
        return f"{r['median_ms']:.{digits}f} ({r['spread'] * 100:.0f}%)"

    rows = []
    for label, m in labelled(load("latency_all_h100.json")["models"]):
        n, a, h = m["ncnn"], m["asyncvk"], m["asyncvk_fp16_arith"]
        l2 = h.get("rel_l2_vs_fp32")
        fp16 = f"{h['median_ms']:.3f} ({f'{l2:.1e}' if isinstance(l2, float) else 'boxes differ'})"
        if m["model"] == "vision_transformer":  # its own run, after gemm.comp's last change
            a, label, fp16 = vit, f"{label} *", "-"
        ln, la = lvp[label.rstrip(" *")]["ncnn"], lvp[label.rstrip(" *")]["asyncvk"]
        rows.append(
            (
                label,
                ms(n, 2),
                ms(a, 3),
                f"**{a['median_ms'] / n['median_ms']:.2f}**",
                fp16,
                ms(ln, 1),
                ms(la, 1),
                f"**{la['median_ms'] / ln['median_ms']:.2f}**",
            )
        )
    return table(
        (
            "model",
            "H100: ncnn ms",
            "asyncvk ms",
            "/ ncnn",
            "fp16 arith. ms (rel L2)",
            "lavapipe: ncnn ms",
            "asyncvk ms",
            "/ ncnn",
        ),
        rows,
    )


def latency_summary() -> str:
    out = []
    for name in ("latency_all_h100.json", "latency_all_lavapipe.json"):
        models = load(name)["models"]
        r = [m["asyncvk"]["median_ms"] / m["ncnn"]["median_ms"] for m in models]
        sp = [m["asyncvk"]["spread"] for m in models]
        nsp = [m["ncnn"]["spread"] for m in models]
        out.append(
            f"{name}: asyncvk/ncnn {span(r)} (median {statistics.median(r):.2f}); asyncvk spread "
            f"<10% for {sum(s < 0.1 for s in sp)} of {len(sp)}, max {max(sp) * 100:.0f}%; ncnn "
            f"spread max {max(nsp) * 100:.0f}%"
        )
    vit = load("latency_vision_transformer_h100.json")["models"][0]["asyncvk"]
    out.append(f"vision_transformer H100: {vit['median_ms']} ms, {vit['process_medians_ms']}")
    fp = [
        m["asyncvk"]["median_ms"] / m["asyncvk_fp16_arith"]["median_ms"]
        for m in load("latency_all_h100.json")["models"]
    ]
    out.append(f"fp32 / fp16 arith: {span(fp)}")
    return "\n".join(out)


def winograd_rule(in_c: int, out_c: int) -> bool:
    """The rule of asyncvk/layers/_conv_shaders.py: harmonic mean of the channels at least 64."""
    return 2 * in_c * out_c / (in_c + out_c) >= 64


def winograd() -> str:
    """Each model's 3x3 stride-1 layers on lavapipe, summed: the tiled shader against the rule."""
    rows = []
    for model, layers in load("winograd_layers_lavapipe.json").items():
        if not layers:
            continue
        direct = sum(x["direct_ms"] for x in layers)
        rule = sum(
            x["winograd_ms"] if winograd_rule(x["in_c"], x["out"][0]) else x["direct_ms"]
            for x in layers
        )
        label = f"{model} (tests/models)" if model in TEST_MODELS else model
        rows.append((label, len(layers), f"{direct:.0f}", f"{rule:.0f}"))
    return table(("model", "3x3 stride-1 layers", "tiled shader ms", "with the rule ms"), rows)


def cpu_choices() -> str:
    out = [winograd()]
    for name, variant in (
        ("latency_winograd_lavapipe.json", "asyncvk_no_winograd"),
        ("latency_shared_weights_lavapipe.json", "asyncvk_own_conv_weights"),
        ("latency_gemm_vec4_loads_lavapipe.json", "asyncvk_scalar_gemm_loads"),
    ):
        parts = []
        for m in load(name)["models"]:
            a, v, n = m["asyncvk"]["median_ms"], m[variant]["median_ms"], m["ncnn"]["median_ms"]
            label = labelled([m])[0][0]
            parts.append(f"{label} {a:.1f} / {variant} {v:.1f} ({a / v:.2f}x) / ncnn {n:.1f}")
        out.append(f"{name}: " + "; ".join(parts))
    pairs = []
    for model in ("efficientnet_b0", "mnasnet", "mobilenet_v2", "mobilenet_v3"):
        d = load(f"paired_depthwise_columns_{model}_lavapipe.json")
        pairs.append(f"{model} {d['pair_ratio_median']} (min {d['min_ms'][0]} -> {d['min_ms'][1]})")
    out.append("depthwise 8 / 4 columns, paired: " + "; ".join(pairs))
    return "\n\n".join(out)


def gpu_choices() -> str:
    conv = load("conv_shaders_h100.json")
    vgg = [x for x in conv["vgg16"] if x["k"] == 3][1:]  # after the 3-channel first layer
    det = load("detection_host_lavapipe.json")["models"]
    one, gemm = span([x["ms"] for x in vgg]), span([x["gemm_ms"] for x in vgg])
    return "\n".join(
        [
            f"vgg16 3x3 layers after the first: one output per invocation {one} ms, GEMM {gemm} "
            f"ms, ratio {span([x['ms'] / x['gemm_ms'] for x in vgg], '{:.1f}')}x",
            "host detection layers, numpy / C: "
            + "; ".join(f"{m['model']} {m['base_ms']} / {m['now_ms']} ms" for m in det),
        ]
    )


def remote_cache() -> str:
    def cells(m: dict[str, Any]) -> list[str]:
        r = m["ratios"]

        def x(k: str) -> float:
            return r[k]["ratio"]

        return [
            f"{m['local_file']['first_output_s']:.3f}",
            f"{m['remote_warm']['first_output_s']:.3f} "
            f"({x('remote_warm_vs_local_file.first_output_s'):.2f}x)",
            f"{m['no_remote_cold']['first_output_s']:.3f}",
            f"{m['remote_down_cold']['first_output_s']:.3f} "
            f"({x('remote_down_vs_no_remote_cold.first_output_s'):.2f}x)",
            f"{x('local_file_remote_down_vs_local_file.first_output_s'):.2f}x",
        ]

    rows = []
    rounds = load("remote_cache_h100.json")["rounds"]
    for i, m in enumerate(rounds[0]["models"]):
        per = [cells(r["models"][i]) for r in rounds]
        rows.append((f"H100 {m['model']}", *(" / ".join(c) for c in zip(*per, strict=True))))
    for m in load("remote_cache_lavapipe.json")["models"]:
        rows.append((f"lavapipe {m['model']}", *cells(m)))
    return table(
        (
            "device, model",
            "local file",
            "empty folder, warm from Redis",
            "no remote, cold",
            "Redis down, cold",
            "local file, Redis down",
        ),
        rows,
    )


def remote_cache_summary() -> str:
    rounds = load("remote_cache_h100.json")["rounds"]
    means = []
    for key in (
        "remote_warm_vs_local_file.first_output_s",
        "remote_down_vs_no_remote_cold.first_output_s",
        "local_file_remote_down_vs_local_file.first_output_s",
    ):
        h100 = [m["ratios"][key]["ratio"] for r in rounds for m in r["models"]]
        lvp = [m["ratios"][key]["ratio"] for m in load("remote_cache_lavapipe.json")["models"]]
        means.append(
            f"{key}: H100 mean {statistics.mean(h100):.2f} ({span(h100)}), lavapipe mean "
            f"{statistics.mean(lvp):.2f} ({span(lvp)})"
        )
    return "\n".join(means)


def shape_hints() -> str:
    h100, lvp = load("shape_hints_h100.json"), load("shape_hints_lavapipe.json")
    by_name = {m["model"]: m for m in lvp["models"]}
    rows = []
    for m in h100["models"]:
        r = m["hinted_over_generic"]
        lv = by_name.get(m["model"], {}).get("hinted_over_generic", {})
        rows.append(
            (
                m["model"],
                f"{m['generic']['pipelines_created']} / {m['hinted']['pipelines_created']}",
                r["median_ms"],
                r["load_model_s"],
                lv.get("median_ms", "-"),
            )
        )
    return table(
        (
            "model",
            "pipelines generic / hinted",
            "H100 latency hinted / generic",
            "H100 load_model hinted / generic",
            "lavapipe latency hinted / generic",
        ),
        rows,
    )


def accuracy_models() -> str:
    fp32, fp16 = load("model_accuracy_h100.json"), load("model_accuracy_fp16_h100.json")
    rows = []
    for key, v in fp32.items():
        if not isinstance(v, dict):
            continue
        rows.append(
            (
                key.replace("/model_fp32", " (fp32 weights)").replace("/model", ""),
                f"{v['gpu']:.1e}",
                f"{fp16[key]['gpu']:.1e}",
                f"{v['cpu']:.1e}",
            )
        )
    return table(("model", "H100 fp32", "H100 fp16 storage", "CPU path"), rows)


def accuracy_suite() -> str:
    out = []
    for name in ("suite_accuracy_h100.json", "suite_accuracy_lavapipe.json"):
        models = load(name)["models"]
        worst = max(models, key=lambda m: m["max_rel_l2"])
        problems = [m["model"] for m in models if m["problems"]]
        median = statistics.median(m["max_rel_l2"] for m in models)
        out.append(
            f"{name}: {len(models)} models, max rel L2 {worst['max_rel_l2']:.1e} "
            f"({worst['model']}), median {median:.1e}; problems: {problems}"
        )
    return "\n".join(out)


def dispatch_warmup() -> str:
    rows = []
    for m in load("dispatch_warmup_lavapipe.json")["models"]:
        none, wait = m["none"], m["wait"]
        rows.append(
            (
                m["model"],
                m["pipelines"],
                f"{none['first_ms']:.0f} ms",
                f"{wait['warmup_ms']:.0f} / {wait['first_ms']:.0f} ms",
                f"{m['wait_total_over_none']}x / {m['async_total_over_none']}x",
                f"{none['second_ms']:.0f} ms",
            )
        )
    return table(
        (
            "model",
            "pipelines",
            "first inference",
            "warm-up, waited / then first inference",
            "warm-up + first: waited / not waited, against none",
            "second inference",
        ),
        rows,
    )


def first_inferences() -> str:
    rows = []
    for m in load("first_inferences_h200.json")["models"]:
        ncnn, ours = m["ncnn"], m["asyncvk"]
        name = m["model"] + (
            " (suite, 227)" if m["model"] == "squeezenet" and m["source"] == "suite" else ""
        )

        def cells(r: dict[str, Any]) -> str:
            return f"{r['first_ms']:.1f}, {r['rest_median_ms']:.2f}, {r['sum_ms']:.1f}"

        adopted = ours.get("all_adopted_ms")
        rows.append(
            (
                name,
                cells(ncnn),
                cells(ours),
                f"{m['asyncvk_sum_over_ncnn']:.2f}",
                "" if adopted is None else f"{adopted:.0f}",
            )
        )
    return table(
        (
            "model",
            "ncnn: first, then median, sum of 20 (ms)",
            "asyncvk: first, then median, sum",
            "asyncvk / ncnn",
            "all adopted",
        ),
        rows,
    )


def devices_throughput() -> str:
    def cell(r: dict[str, Any]) -> str:
        return f"{r['requests_per_s']:.0f}, {r['p50_ms']:.1f} / {r['p99_ms']:.1f}"

    rows = []
    for m in load("devices_throughput_2x_h200.json")["models"]:
        for clients, p in m["by_clients"].items():
            rows.append(
                (
                    f"{m['model']} 224",
                    clients,
                    cell(p["one_gpu"]),
                    cell(p["all_gpus"]),
                    f"{p['in_process_speedup']}x",
                    cell(p["http_one_gpu"]),
                    cell(p["http_all_gpus"]),
                    f"{p['http_speedup']}x",
                )
            )
    return table(
        (
            "model",
            "clients",
            "in process, 1 GPU",
            "in process, 2 GPUs",
            "gain",
            "HTTP, 1 GPU",
            "HTTP, 2 GPUs",
            "gain",
        ),
        rows,
    )


SECTIONS: dict[str, Callable[[], str]] = {
    "pipeline_creation": pipeline_creation,
    "cold_start": cold_start,
    "cold_start_summary": cold_start_summary,
    "packaged_spirv": packaged_spirv,
    "cold_load": cold_load,
    "process_floor": process_floor,
    "import_cost": import_cost,
    "latency": latency,
    "latency_summary": latency_summary,
    "winograd": winograd,
    "cpu_choices": cpu_choices,
    "gpu_choices": gpu_choices,
    "dispatch_warmup": dispatch_warmup,
    "remote_cache": remote_cache,
    "remote_cache_summary": remote_cache_summary,
    "shape_hints": shape_hints,
    "accuracy_models": accuracy_models,
    "accuracy_suite": accuracy_suite,
    "first_inferences": first_inferences,
    "devices_throughput": devices_throughput,
}


if __name__ == "__main__":
    for section in sys.argv[1:] or SECTIONS:
        print(f"## {section}\n\n{SECTIONS[section]()}\n")
