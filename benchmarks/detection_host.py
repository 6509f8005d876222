"""CPU time of the detection layers that run on the host, one implementation against another.

Six models of ncnn's benchmark suite end in YoloDetectionOutput, Yolov3DetectionOutput or
DetectionOutput, which run on the host. For each model (a folder of model.param, model.bin,
input.npy and meta.json, as the suite's generator writes them) one real run captures the host
layer's inputs and params; then a fresh process per implementation (``--variant NAME=ROOT``, a
checkout whose ``asyncvk`` is imported) times the layer's ``forward`` alone, median of
``--calls``. Outputs are compared bit for bit with the first variant's.

    python benchmarks/detection_host.py --models SUITE_DIR/mobilenet_yolo SUITE_DIR/yolov4-tiny \\
        --variant base=OTHER_CHECKOUT --variant now=. \\
        --out benchmarks/results/detection_host_lavapipe.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pickle
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HOST_TYPES = ("YoloDetectionOutput", "Yolov3DetectionOutput", "DetectionOutput")


async def _capture(model: Path) -> dict[str, Any]:
    """One real run; the host layer's type, params (its __dict__) and inputs."""
    import asyncvk
    import asyncvk.net._plan as plan

    captured: dict[str, Any] = {}
    real = plan.run_cpu_layer

    def spy(node: Any, inputs: list[np.ndarray]) -> list[np.ndarray]:
        layer = node.layer
        if layer.type_name in HOST_TYPES:
            captured.update(
                type=layer.type_name,
                state=dict(vars(layer)),
                inputs=[np.array(x, copy=True) for x in inputs],
            )
        return real(node, inputs)

    plan.run_cpu_layer = spy
    meta = json.loads((model / "meta.json").read_text())
    async with asyncvk.Net(asyncvk.Option()) as net:
        await net.load_param(model / "model.param")
        await net.load_model(model / "model.bin")
        ex = net.create_extractor()
        ex.input(meta["input"], np.load(model / "input.npy"))
        await ex.extract(meta["output"])
    return captured


def _time(capture: Path, calls: int, result: Path) -> None:
    """``forward`` of the captured layer, ``calls`` times, in this process's asyncvk."""
    from asyncvk.layers import layer_class

    captured = pickle.loads(capture.read_bytes())
    cls = layer_class(captured["type"])
    assert cls is not None
    layer = cls.__new__(cls)
    layer.__dict__.update(captured["state"])
    inputs = captured["inputs"]
    times = []
    with np.errstate(all="ignore"):
        output = layer.forward([x.copy() for x in inputs])[0]  # warm-up
        for _ in range(calls):
            copies = [x.copy() for x in inputs]  # YoloDetectionOutput works on a copy anyway
            start = time.perf_counter()
            layer.forward(copies)
            times.append(time.perf_counter() - start)
    np.save(result.with_suffix(".npy"), output)
    result.write_text(json.dumps({"median_ms": 1e3 * statistics.median(times)}))


def _run_variant(root: Path, capture: Path, calls: int, tmp: Path) -> tuple[float, np.ndarray]:
    result = tmp / f"{root.name}-{capture.stem}.json"
    env = {**os.environ, "PYTHONPATH": str(root)}
    subprocess.run(
        [sys.executable, __file__, "--time", str(capture), str(result), str(calls)],
        check=True,
        env=env,
        cwd=root,
    )
    median = json.loads(result.read_text())["median_ms"]
    return median, np.load(result.with_suffix(".npy"))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--time":
        _time(Path(sys.argv[2]), int(sys.argv[4]), Path(sys.argv[3]))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--capture":
        Path(sys.argv[3]).write_bytes(pickle.dumps(asyncio.run(_capture(Path(sys.argv[2])))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", type=Path, required=True)
    parser.add_argument("--variant", action="append", required=True, help="NAME=ROOT")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    variants = [(n, Path(r).resolve()) for n, r in (v.split("=", 1) for v in args.variant)]
    rows = []
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        for model in args.models:
            capture = tmp / f"{model.name}.pkl"
            root = variants[-1][1]  # the newest captures: its runs are the fastest
            env = {**os.environ, "PYTHONPATH": str(root)}
            subprocess.run(
                [sys.executable, __file__, "--capture", str(model), str(capture)],
                check=True,
                env=env,
                cwd=root,
            )
            layer = pickle.loads(capture.read_bytes())
            row: dict[str, Any] = {
                "model": model.name,
                "layer": layer["type"],
                "inputs": [list(x.shape) for x in layer["inputs"]],
            }
            first: np.ndarray | None = None
            for variant, root in variants:
                median, output = _run_variant(root, capture, args.calls, tmp)
                row[f"{variant}_ms"] = round(median, 3)
                if first is None:
                    first = output
                    row["rows"] = int(output.shape[0])
                else:
                    same = output.shape == first.shape and output.tobytes() == first.tobytes()
                    row[f"{variant}_bit_identical"] = same
            print(json.dumps(row), flush=True)
            rows.append(row)
    report = {
        "what": "one forward of the host detection layer, median of --calls, CPU time",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores ({platform.processor()})",
        "calls": args.calls,
        "variants": {n: str(r) for n, r in variants},
        "models": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
