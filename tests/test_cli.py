"""The command line as users run it: JSON reports, a pre-built cache, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from cli_runner import cli, run_args

M = Path(__file__).parent / "models" / "cunet"


def test_run_reports_the_fields_and_writes_outputs(tmp_path: Path) -> None:
    out = tmp_path / "y.npy"
    proc = cli(
        *run_args(M),
        "--output",
        f"out0={out}",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    for key in (
        "load_param_s",
        "load_model_s",
        "infer_s",
        "pipelines_requested",
        "pipelines_created",
        "spirv_compiled",
        "spirv_cache_hits",
        "cache_loaded",
        "cache_reason",
        "device",
    ):
        assert key in report, key
    assert {"name", "driver"} <= set(report["device"])
    y, ref = np.load(out), np.load(M / "output.npy")
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 2e-3


def test_fp16_arithmetic_is_asked_for_and_reported(tmp_path: Path) -> None:
    """``--fp16-arith`` reaches the Net's options, and the report says what the device made of
    it: fp16 arithmetic where it has it, convolutions on matrix units where it has those."""
    from asyncvk.gpu import get_gpu_info
    from asyncvk.layers._conv_shaders import gemm_coopmat
    from asyncvk.shader import ShaderOptions

    info = get_gpu_info()
    matrix_units = gemm_coopmat(ShaderOptions(use_fp16_arithmetic=True).supported_on(info), info)
    for flags, asked in (((), False), (("--fp16-arith",), True)):
        out = tmp_path / f"y{asked}.npy"
        proc = cli(*run_args(M), "--output", f"out0={out}", "--json", *flags)
        assert proc.returncode == 0, proc.stderr
        precision = json.loads(proc.stdout)["precision"]
        assert precision["fp16_storage"] is False
        assert precision["fp16_arithmetic"] is (asked and info.support_fp16_arithmetic)
        assert precision["matrix_unit_convolutions"] is (asked and matrix_units)
        y, ref = np.load(out), np.load(M / "output.npy")
        assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 5e-3


def test_cpu_path(tmp_path: Path) -> None:
    proc = cli(
        *run_args(M),
        "--cpu",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["pipelines_created"] == 0 and "cpu" in report["device"]["name"]


def test_bench_reports_latency() -> None:
    proc = cli(
        "bench",
        str(M / "model.param"),
        str(M / "model.bin"),
        "--shape",
        "in0=3,44,44",
        "--loops",
        "3",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    latency = json.loads(proc.stdout)["latency_ms"]
    assert latency["min"] <= latency["median"] <= latency["max"] and latency["loops"] == 3


def test_cache_warm_then_must_hit(tmp_path: Path) -> None:
    cache = tmp_path / "deploy.vkcache"
    warm = cli(
        "cache",
        "warm",
        str(M / "model.param"),
        str(M / "model.bin"),
        "--cache",
        str(cache),
        "--shape",
        "in0=3,44,44",
        "--json",
    )
    assert warm.returncode == 0, warm.stderr
    assert json.loads(warm.stdout)["cache_saved"]
    assert cli("cache", "verify", str(cache)).returncode == 0
    hit = cli(
        *run_args(M),
        "--cache",
        str(cache),
        "--must-hit",
        "--json",
    )
    assert hit.returncode == 0, hit.stderr
    report = json.loads(hit.stdout)
    assert report["cache_loaded"] and report["spirv_compiled"] == 0
    miss = cli(
        *run_args(M),
        "--cache",
        str(tmp_path / "empty.vkcache"),
        "--must-hit",
    )
    assert miss.returncode == 1 and "must-hit" in miss.stderr
    assert "Traceback" not in miss.stderr


def test_errors_are_one_line_without_traceback(tmp_path: Path) -> None:
    proc = cli(
        "run",
        str(M / "model.param"),
        str(tmp_path / "missing.bin"),
        "--input",
        f"in0={M / 'input.npy'}",
    )
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("asyncvk: error:")
    assert "missing.bin" in lines[0]
    bad = tmp_path / "bad.param"
    bad.write_text("7767517\n1 1\nFrobnicate x 0 1 y\n")
    proc = cli("run", str(bad), str(M / "model.bin"))
    assert proc.returncode == 1 and "unsupported layer type: Frobnicate (line 3" in proc.stderr
    assert "bad.param:3" in proc.stderr


def test_a_malformed_serve_warm_up_is_one_line_before_anything_starts() -> None:
    proc = cli("serve", str(M / "model.param"), str(M / "model.bin"), "--warm-up", "in0")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("asyncvk: error:")
    assert "expected NAME=C,H,W, got 'in0'" in lines[0]
    assert "serving on" not in proc.stdout


def test_layers_lists_every_registered_type_with_where_it_runs() -> None:
    from asyncvk.layers._catalog import layer_catalog, layers_markdown
    from asyncvk.layers._ncnn_types import NCNN_LAYER_TYPES

    catalog = layer_catalog()
    proc = cli("layers", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["count"] == len(catalog) == len(report["layers"])
    assert report["layers"] == [info.as_json() for info in catalog]
    conv = next(entry for entry in report["layers"] if entry["type"] == "Convolution")
    assert conv["runs_on"] == "GPU" and conv["family"] == "convolution"
    proc = cli("layers")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    on = [info.runs_on for info in catalog if info.type in NCNN_LAYER_TYPES]
    assert lines[0].startswith(
        f"{len(NCNN_LAYER_TYPES)} ncnn layer types: {on.count('GPU')} on the GPU, "
        f"{on.count('CPU')} on the CPU, {on.count('none')} not supported."
    )
    assert "Also ArgMax (CPU), which ncnn's builds leave out." in lines[0]
    where = {"GPU": "GPU", "CPU": "CPU", "none": "not"}
    assert [line.split()[:2] for line in lines[1:]] == [[i.type, where[i.runs_on]] for i in catalog]
    lstm = next(entry for entry in report["layers"] if entry["type"] == "LSTM")
    assert lstm["runs_on"] in ("GPU", "CPU", "none")
    proc = cli("layers", "--markdown")
    assert proc.returncode == 0 and proc.stdout == layers_markdown(catalog)
    proc = cli("layers", "--json", "--markdown")
    assert proc.returncode == 2 and "not allowed with argument" in proc.stderr


def test_an_empty_output_is_reported_as_empty_in_strict_json(tmp_path: Path) -> None:
    """A detector that finds nothing gives an empty blob: its mean is null, not NaN (which is
    not JSON), and the text report says empty."""
    param = tmp_path / "det.param"
    param.write_text(
        "7767517\n4 4\nInput loc 0 1 loc\nInput conf 0 1 conf\nInput prior 0 1 prior\n"
        "DetectionOutput det 3 1 loc conf prior out0 0=3 4=0.99\n"
    )
    (tmp_path / "det.bin").write_bytes(b"")
    priors = np.array([[0.1, 0.1, 0.4, 0.4, 0.5, 0.5, 0.9, 0.9], [0.1] * 8], np.float32)
    arrays = {
        "loc": np.zeros(8, np.float32),
        "conf": np.full(6, 1 / 3, np.float32),
        "prior": priors,
    }
    args = []
    for name, array in arrays.items():
        np.save(tmp_path / f"{name}.npy", array)
        args += ["--input", f"{name}={tmp_path / f'{name}.npy'}"]
    run = ["run", str(param), str(tmp_path / "det.bin"), *args, "--output", "out0"]

    def no_constants(name: str) -> None:
        raise AssertionError(f"{name} in --json output")

    proc = cli(*run, "--json")
    assert proc.returncode == 0, proc.stderr
    output = json.loads(proc.stdout, parse_constant=no_constants)["outputs"]["out0"]
    assert output == {"shape": [0], "mean": None, "checksum": 0.0}
    text = cli(*run)
    assert text.returncode == 0, text.stderr
    assert "output out0: shape [0] empty" in text.stdout
    assert "Warning" not in text.stderr


def test_a_cache_folder_needs_both_its_dir_and_its_graph_key(tmp_path: Path) -> None:
    folder = str(tmp_path / "c")
    model = [str(M / "model.param"), str(M / "model.bin")]
    for args in (
        [*run_args(M), "--cache-dir", folder],
        [*run_args(M), "--graph-key", "k"],
        ["serve", *model, "--cache-dir", folder],
    ):
        proc = cli(*args)
        assert proc.returncode != 0 and "--cache-dir and --graph-key go together" in proc.stderr
        assert not (tmp_path / "c").exists()  # refused before anything is written
