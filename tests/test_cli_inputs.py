"""How ``asyncvk run --input`` and ``bench`` take what a user types: .npy, .npz, dtypes, counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from cli_runner import cli

CUNET = Path(__file__).parent / "models" / "cunet"


def _run(spec: str, out: Path | None = None) -> tuple[int, str, np.ndarray | None]:
    """Run cunet on ``--input spec``; the output array, or None when the run failed."""
    args = ["run", str(CUNET / "model.param"), str(CUNET / "model.bin"), "--input", spec]
    if out is not None:
        args += ["--output", f"out0={out}"]
    proc = cli(*args)
    if proc.returncode != 0 or out is None:
        return proc.returncode, proc.stderr, None
    return proc.returncode, proc.stderr, np.load(out)


@pytest.fixture(scope="module")
def expected(tmp_path_factory: pytest.TempPathFactory) -> np.ndarray:
    code, err, y = _run(f"in0={CUNET / 'input.npy'}", tmp_path_factory.mktemp("ref") / "y.npy")
    assert code == 0 and y is not None, err
    return y


def test_npz_by_name_by_key_and_alone(tmp_path: Path, expected: np.ndarray) -> None:
    x = np.load(CUNET / "input.npy")
    np.savez(tmp_path / "named.npz", in0=x, other=x * 2)
    np.savez(tmp_path / "alone.npz", anything=x)
    np.savez(tmp_path / "keyed.npz", a=x * 2, b=x)
    for spec in (
        f"in0={tmp_path / 'named.npz'}",
        f"in0={tmp_path / 'alone.npz'}",
        f"in0={tmp_path / 'keyed.npz'}:b",
    ):
        code, err, y = _run(spec, tmp_path / "y.npy")
        assert code == 0 and y is not None, (spec, err)
        assert np.array_equal(y, expected), spec


def test_an_npz_without_the_array_names_what_it_holds(tmp_path: Path) -> None:
    x = np.load(CUNET / "input.npy")
    np.savez(tmp_path / "two.npz", a=x, b=x)
    code, err, _ = _run(f"in0={tmp_path / 'two.npz'}")
    assert code == 1 and "it holds: a, b" in err and ":KEY" in err, err


def test_a_missing_input_file_names_the_argument(tmp_path: Path) -> None:
    code, err, _ = _run(f"in0={tmp_path / 'nothere.npy'}")
    assert code == 1 and "--input in0=" in err and "does not exist" in err, err
    assert "Errno" not in err


@pytest.mark.parametrize("dtype", ["float64", "int64", "float16", "uint8"])
def test_real_numbers_of_any_width_are_converted_to_float32(tmp_path: Path, dtype: str) -> None:
    x = np.load(CUNET / "input.npy")
    if dtype in ("int64", "uint8"):
        x = np.round(x * 4).clip(0, 255)
    x = x.astype(dtype)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "x32.npy", x.astype(np.float32))  # what the rule says it becomes
    code, err, y = _run(f"in0={tmp_path / 'x.npy'}", tmp_path / "y.npy")
    assert code == 0 and y is not None, err
    code, err, y32 = _run(f"in0={tmp_path / 'x32.npy'}", tmp_path / "y32.npy")
    assert code == 0 and y32 is not None, err
    assert np.array_equal(y, y32)


@pytest.mark.parametrize("dtype", ["complex64", "bool", "<U3"])
def test_other_dtypes_are_refused_with_a_clear_message(tmp_path: Path, dtype: str) -> None:
    np.save(tmp_path / "x.npy", np.zeros((3, 44, 44), dtype))
    code, err, _ = _run(f"in0={tmp_path / 'x.npy'}")
    assert code == 1 and "not a real number type" in err, err


@pytest.mark.parametrize(
    ("flag", "value"), [("--loops", "0"), ("--warmup", "-1"), ("--loops", "x")]
)
def test_bench_counts_are_validated(flag: str, value: str) -> None:
    proc = cli(
        "bench",
        str(CUNET / "model.param"),
        str(CUNET / "model.bin"),
        "--shape",
        "in0=3,44,44",
        flag,
        value,
    )
    assert proc.returncode == 2 and f"argument {flag}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


async def test_extractor_input_follows_the_same_rule() -> None:
    from asyncvk import Net, Option

    net = Net(Option(use_vulkan_compute=False))
    await net.load_param(CUNET / "model.param")
    await net.load_model(CUNET / "model.bin")
    ex = net.create_extractor()
    ex.input("in0", np.zeros((3, 44, 44), np.int64))  # converted
    for bad in (np.zeros((3, 44, 44), bool), np.zeros((3, 44, 44), np.complex64)):
        with pytest.raises(ValueError, match="not a real number type"):
            ex.input("in0", bad)
    await net.aclose()


def test_a_wrong_channel_count_says_what_the_model_expects(tmp_path: Path) -> None:
    squeezenet = Path(__file__).parent / "models" / "squeezenet"
    np.save(tmp_path / "one.npy", np.zeros((1, 64, 64), np.float32))
    proc = cli(
        "run",
        str(squeezenet / "model.param"),
        str(squeezenet / "model.bin"),
        "--input",
        f"in0={tmp_path / 'one.npy'}",
    )
    assert proc.returncode == 1 and "expects 3 input channels, got 1" in proc.stderr, proc.stderr
