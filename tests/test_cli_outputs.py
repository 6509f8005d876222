"""``asyncvk run`` computes every output when none is named and writes them with
``--output-dir``; ``run`` and ``bench`` take ``--random-weights`` for a ``.param`` alone."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from cli_runner import cli
from test_net_run import OUTPUTS, PARAM

from asyncvk.net._random_weights import random_weights

SQUEEZENET = Path(__file__).parent / "ncnn_benchmark" / "squeezenet.param"


def _model(tmp_path: Path) -> tuple[Path, Path, Path]:
    param = tmp_path / "three.param"
    param.write_text(PARAM.format(mask=0))
    weights = tmp_path / "three.bin"
    weights.write_bytes(random_weights(param))
    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(0).uniform(-1, 1, (3, 10, 12)).astype(np.float32))
    return param, weights, x


def test_run_computes_and_writes_every_output(tmp_path: Path) -> None:
    param, weights, x = _model(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    proc = cli("run", param, weights, "--input", f"data={x}", "--output-dir", out, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert list(report["outputs"]) == OUTPUTS
    assert report["written"] == {name: str(out / f"{name}.npy") for name in OUTPUTS}
    # the same outputs as each one asked for alone, through --output NAME=PATH
    for name in OUTPUTS:
        alone = tmp_path / f"{name}-alone.npy"
        proc = cli("run", param, weights, "--input", f"data={x}", "--output", f"{name}={alone}")
        assert proc.returncode == 0, proc.stderr
        np.testing.assert_allclose(np.load(out / f"{name}.npy"), np.load(alone), rtol=1e-5)
    text = cli("run", param, weights, "--input", f"data={x}")
    assert text.returncode == 0, text.stderr
    for name in OUTPUTS:
        assert f"output {name}: shape" in text.stdout and "not written" in text.stdout


def test_output_dir_must_be_a_folder_that_can_be_written(tmp_path: Path) -> None:
    param, weights, x = _model(tmp_path)
    proc = cli("run", param, weights, "--input", f"data={x}", "--output-dir", tmp_path / "no")
    assert proc.returncode == 1 and f"--output-dir {tmp_path / 'no'}: no such folder" in proc.stderr


def test_random_weights_run_a_param_alone(tmp_path: Path) -> None:
    """ncnn ships its benchmark models without weights: bench them as benchncnn does."""
    args = ("--shape", "data=3,64,64", "--loops", "1", "--warmup", "0", "--json")
    proc = cli("bench", SQUEEZENET, "--random-weights", "--batch", "2", *args)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["model"] == "random weights (seed 0)" and report["batch"] == 2
    assert report["outputs"] == ["output"] and report["random_weights_s"] >= 0
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((3, 64, 64), np.float32))
    proc = cli("run", SQUEEZENET, "--random-weights", "--input", f"data={x}", "--json")
    assert proc.returncode == 0, proc.stderr
    prob = json.loads(proc.stdout)["outputs"]["output"]
    assert prob["shape"] == [1000] and abs(prob["checksum"] - 1.0) < 1e-3  # a softmax


def test_random_weights_or_a_bin_not_both_nor_neither(tmp_path: Path) -> None:
    param, weights, x = _model(tmp_path)
    both = cli("run", param, weights, "--random-weights", "--input", f"data={x}")
    assert both.returncode == 1
    assert f"give the .bin ({weights}) or --random-weights, not both" in both.stderr
    neither = cli("run", param, "--input", f"data={x}")
    assert neither.returncode == 1
    assert "the .bin is missing (or use --random-weights for a .param alone)" in neither.stderr
