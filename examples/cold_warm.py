"""The main job: a model loaded cold in a fresh process, then warm from the cache file the cold
run saved, with timings and the result checked against PyTorch's output.

    python examples/cold_warm.py [MODEL_DIR]      (default: tests/models/squeezenet)

MODEL_DIR holds model.param, model.bin, input.npy (the input ``in0``) and output.npy (the
reference for ``out0``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MODEL_FILES = ("model.param", "model.bin", "input.npy", "output.npy")
LEGEND = """\
  param, model   load_param and load_model (model: weights read, pipelines built, uploaded)
  infer          the first inference, plan recording included
  first output   process start to the first result: what a user waits for
  pipelines      Vulkan compute pipelines created in this process (warm: from the cached blob)
  GLSL           shaders compiled from GLSL to SPIR-V in this process
  package        shaders whose SPIR-V the install compiled (a cold run; warm, the cache file
                 holds them; ASYNCVK_PACKAGED_SPIRV=0 compiles them instead)
On lavapipe (Vulkan on the CPU) the network itself runs on the CPU, so infer dominates and the
cache saves only the pipeline part; on a GPU inference takes milliseconds and the cold load is
most of the first output's time."""


def run(model: Path, cache: Path, output: Path) -> dict[str, Any]:
    cmd = [
        sys.executable,
        "-m",
        "asyncvk",
        "run",
        str(model / "model.param"),
        str(model / "model.bin"),
        "--input",
        f"in0={model / 'input.npy'}",
        "--output",
        f"out0={output}",
        "--cache",
        str(cache),
        "--json",
    ]
    env = dict(os.environ, MESA_SHADER_CACHE_DISABLE="true", __GL_SHADER_DISK_CACHE="0")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        sys.exit(f"asyncvk run failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def first_output_s(report: dict[str, Any]) -> float:
    """Process start to first output, from whichever clock field this asyncvk reports."""
    clock = report.get("clock") or {}
    for value in (
        clock.get("process_start_to_first_output_s"),
        report.get("time_to_first_result_s"),
        report.get("load_and_infer_s"),
    ):
        if isinstance(value, (int, float)):
            return float(value)
    return float("nan")


def check_model_dir(model: Path) -> None:
    if not model.is_dir():
        sys.exit(f"cold_warm.py: {model} is not a folder")
    missing = [name for name in MODEL_FILES if not (model / name).is_file()]
    if missing:
        sys.exit(
            f"cold_warm.py: {model} lacks {', '.join(missing)} "
            f"(a model folder holds {', '.join(MODEL_FILES)})"
        )


def main() -> int:
    model = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "tests" / "models" / "squeezenet"
    check_model_dir(model)
    reference = np.load(model / "output.npy")
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "model.vkcache"
        rows = []
        for label in ("cold", "warm"):
            out = Path(tmp) / f"{label}.npy"
            report = run(model, cache, out)
            y = np.load(out)
            err = float(np.linalg.norm(y - reference) / np.linalg.norm(reference))
            rows.append((label, report, err, y))
    print(f"model   {model.name}   device {rows[0][1]['device']['name']}")
    print(
        f"{'':6} {'param':>8} {'model':>9} {'infer':>9} {'first output':>13} "
        f"{'pipelines':>10} {'GLSL':>5} {'package':>8} {'rel. L2 vs PyTorch':>19}"
    )
    for label, r, err, _ in rows:
        first = first_output_s(r)
        print(
            f"{label:6} {r['load_param_s'] * 1e3:7.1f}ms {r['load_model_s'] * 1e3:8.1f}ms "
            f"{r['infer_s'] * 1e3:8.1f}ms {first * 1e3:12.1f}ms "
            f"{r['pipelines_created']:>10} {r['spirv_compiled']:>5} "
            f"{r.get('spirv_packaged', 0):>8} {err:19.2e}"
        )
    print(LEGEND)
    warm = rows[1][1]
    print(f"warm cache: {warm['cache_reason']}")
    same = np.array_equal(rows[0][3], rows[1][3])
    print(f"cold and warm outputs bit-identical: {same}")
    ok = same and all(err < 2e-3 for _, _, err, _ in rows) and warm["spirv_compiled"] == 0
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
