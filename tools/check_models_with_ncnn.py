"""Run every test model with the ``ncnn`` wheel and print its error against PyTorch's output.

Proves the committed files are valid ncnn models and shows the accuracy floor ncnn itself
reaches. Maintainer tool (CI does not run it)::

    pip install ncnn==1.0.20261020
    python tools/check_models_with_ncnn.py [--models rrdb,cunet] [--no-vulkan]

Modes, for every variant a model has (``model`` = fp16 weights, ``model_fp32``):

* ``cpu``: ncnn's CPU path with its default options;
* ``vulkan``: ncnn's Vulkan path with its default options (fp16 storage and arithmetic where the
  device has them, as on lavapipe);
* ``vulkan_fp32``: the Vulkan path with fp16 / bf16 storage, packing and arithmetic turned off.

Vulkan runs on ``--device`` (default: ncnn's default GPU; lavapipe on a machine without one) and
are skipped with a note when ncnn sees no Vulkan device. Prints one JSON object: per model and
``variant/mode``, the relative L2 error ``|y - ref| / |ref|`` and the largest absolute error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent / "tests" / "models"
MODES = ("cpu", "vulkan", "vulkan_fp32")


def run(model_dir: Path, stem: str, mode: str, device: int | None) -> dict[str, Any]:
    import ncnn

    meta = json.loads((model_dir / "meta.json").read_text())
    net = ncnn.Net()
    net.opt.use_vulkan_compute = mode != "cpu"
    if mode == "vulkan_fp32":
        for flag in (
            "use_fp16_packed",
            "use_fp16_storage",
            "use_fp16_arithmetic",
            "use_bf16_packed",
            "use_bf16_storage",
        ):
            setattr(net.opt, flag, False)
    if mode != "cpu" and device is not None:
        net.set_vulkan_device(device)
    if net.load_param(str(model_dir / f"{stem}.param")) != 0:
        return {"error": "load_param failed"}
    if net.load_model(str(model_dir / f"{stem}.bin")) != 0:
        return {"error": "load_model failed"}
    x = np.load(model_dir / "input.npy")
    expected = np.load(model_dir / "output.npy")
    ex = net.create_extractor()
    ex.input(meta["input"], ncnn.Mat(np.ascontiguousarray(x)))
    ret, out = ex.extract(meta["output"])
    if ret != 0:
        return {"error": f"extract returned {ret}"}
    y = np.array(out)
    if y.size != expected.size:
        return {"error": f"output shape {list(y.shape)}, expected {list(expected.shape)}"}
    y = y.reshape(expected.shape)
    del ex, net
    return {
        "rel_l2": float(np.linalg.norm(y - expected) / np.linalg.norm(expected)),
        "max_abs": float(np.abs(y - expected).max()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated names (default: all)")
    parser.add_argument("--no-vulkan", action="store_true")
    parser.add_argument("--device", type=int, default=None, help="Vulkan device index")
    args = parser.parse_args(argv)
    try:
        import ncnn
    except ImportError as e:
        print(json.dumps({"error": f"ncnn wheel not importable: {e}"}))
        return 0
    from importlib.metadata import version

    gpus = 0 if args.no_vulkan else ncnn.get_gpu_count()
    device = args.device
    if device is None:
        device = ncnn.get_default_gpu_index() if gpus else 0
    report: dict[str, Any] = {
        "ncnn": version("ncnn"),
        "vulkan_device": ncnn.get_gpu_info(device).device_name() if gpus else None,
        "models": {},
    }
    if not gpus:
        report["note"] = "Vulkan modes skipped: " + (
            "--no-vulkan" if args.no_vulkan else "ncnn sees no Vulkan device"
        )
    names = [n for n in args.models.split(",") if n]
    dirs = [ROOT / n for n in names] or sorted(p for p in ROOT.iterdir() if p.is_dir())
    for model_dir in dirs:
        meta = json.loads((model_dir / "meta.json").read_text())
        row: dict[str, Any] = {}
        for stem in meta["variants"]:
            for mode in MODES:
                if mode != "cpu" and not gpus:
                    continue
                try:
                    row[f"{stem}/{mode}"] = run(model_dir, stem, mode, device)
                except Exception as e:  # report and go on with the other models
                    row[f"{stem}/{mode}"] = {"error": repr(e)}
        report["models"][model_dir.name] = row
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
