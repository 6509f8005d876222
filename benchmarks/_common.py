"""What every benchmark script shares: the test models, fresh child processes, the JSON report.

Benchmarks measure once-per-process costs (driver load, compiler set-up, imports), so most run
each sample in a fresh interpreter with the drivers' own disk caches off.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MODELS = ROOT / "tests" / "models"


def free_port() -> int:
    """A port on 127.0.0.1 free now (bound, then released for a server to take)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def model_names() -> list[str]:
    return sorted(p.name for p in MODELS.iterdir() if p.is_dir())


def child_env() -> dict[str, str]:
    """This environment, with asyncvk importable and Mesa's and NVIDIA's disk caches off."""
    return dict(
        os.environ,
        MESA_SHADER_CACHE_DISABLE="true",
        __GL_SHADER_DISK_CACHE="0",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )


def run_child(code: str, *args: str, timeout: float = 900) -> dict[str, Any]:
    """Run ``code`` in a fresh interpreter; its last stdout line is the JSON result.

    A failing child raises, naming its arguments and ending with its stderr.
    """
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        env=child_env(),
        timeout=timeout,
    )
    if out.returncode != 0:
        raise RuntimeError(f"child {list(args)} failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def spread(samples: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Median, min and max of each value the first sample has, over the samples that have it."""
    out: dict[str, dict[str, float]] = {}
    for key in samples[0]:
        values = [s[key] for s in samples if key in s]
        out[key] = {
            "median": round(statistics.median(values), 4),
            "min": round(min(values), 4),
            "max": round(max(values), 4),
        }
    return out


def emit(report: dict[str, Any], out: str | None, *, indent: int = 2) -> None:
    """Print the report as JSON, and write it to ``out`` too when given."""
    text = json.dumps(report, indent=indent)
    if out:
        Path(out).write_text(text + "\n")
    print(text)


def model_folders(
    models: str, suite: Path | None, suite_models: str, models_dir: Path = MODELS
) -> list[tuple[str, Path]]:
    """(source, folder) for every model asked for: ``models`` (comma-separated names) in
    ``models_dir`` first, then the folders ``suite_models.py`` made in ``suite`` (all, or those
    ``suite_models`` names). Exits naming what is missing."""
    label = "tests/models" if models_dir == MODELS else str(models_dir)
    folders = [(label, models_dir / m) for m in filter(None, models.split(","))]
    if suite is not None:
        if not suite.is_dir():
            raise SystemExit(f"--suite {suite}: not a folder (make it with suite_models.py)")
        wanted = set(filter(None, suite_models.split(",")))
        found = sorted(d for d in suite.iterdir() if (d / "meta.json").exists())
        missing = wanted - {d.name for d in found}
        if missing:
            raise SystemExit(f"--suite-models: {sorted(missing)} not in {suite}")
        folders += [("suite", d) for d in found if not wanted or d.name in wanted]
    for _, d in folders:
        if not (d / "meta.json").exists():
            raise SystemExit(f"{d}: no meta.json (not a model folder)")
    return folders


def blob_names(d: Path) -> tuple[str, str]:
    """(input blob, output blob) from a model folder's ``meta.json``: tests/models and the
    suite's folders both name them there."""
    meta_path = d / "meta.json"
    try:
        meta = json.loads(meta_path.read_text())
        return str(meta["input"]), str(meta["output"])
    except (OSError, ValueError, KeyError) as exc:
        raise SystemExit(
            f"{meta_path}: cannot read the input and output blob names: {exc}"
        ) from exc


async def timed_extractions(
    net: Any, in_name: str, x: Any, out_name: str, loops: int, warm_up: int = 3
) -> list[float]:
    """Seconds of ``loops`` extractions through fresh extractors, after ``warm_up`` untimed
    ones (the first records the plan)."""

    async def once() -> float:
        t = time.perf_counter()
        ex = net.create_extractor()
        ex.input(in_name, x)
        await ex.extract(out_name)
        return time.perf_counter() - t

    for _ in range(warm_up):
        await once()
    return [await once() for _ in range(loops)]
