"""What asyncvk's own modules cost a start, after what every numpy asyncio Vulkan program imports:
the modules ``asyncvk run`` loads before it reads a model, and the share of that spent creating
dataclasses (each generated method is compiled from source at import).

    python benchmarks/import_cost.py [--processes 7] [--out FILE.json]

Each sample is a fresh interpreter that imports numpy, asyncio and vulkan first, then times
``asyncvk.cli`` and ``asyncvk.cli._runner`` (which bring the net, cache, gpu and layer modules) with
``dataclasses``' class processing timed alongside. Where ``msgspec`` is importable it also times
an alternative: its import, and 40 frozen eight-field classes made as dataclasses and as
``msgspec.Struct`` (C).
"""

from __future__ import annotations

import argparse

from _common import emit, run_child, spread

CHILD = r"""
import json, sys, time
import numpy, asyncio, argparse, vulkan
import dataclasses
spent = []
process_class = dataclasses._process_class
def timed(cls, *args, **kwargs):
    t = time.perf_counter()
    try:
        return process_class(cls, *args, **kwargs)
    finally:
        spent.append(time.perf_counter() - t)
dataclasses._process_class = timed
t = time.perf_counter()
import asyncvk.cli, asyncvk.cli._runner
out = {"asyncvk_modules_s": time.perf_counter() - t, "dataclasses_s": sum(spent),
       "dataclasses": len(spent),
       "modules": sum(1 for m in sys.modules if m.startswith("asyncvk"))}
dataclasses._process_class = process_class
try:
    t = time.perf_counter()
    import msgspec
    out["msgspec_import_s"] = time.perf_counter() - t
except ImportError:
    msgspec = None
def made(base, **options):
    t = time.perf_counter()
    for k in range(40):
        ns = {"__annotations__": {f"f{i}": "int" for i in range(8)}}
        ns.update({f"f{i}": 0 for i in range(4, 8)})
        if base is None:
            dataclasses.dataclass(frozen=True)(type(f"D{k}", (), ns))
        else:
            type(f"M{k}", (base,), ns, **options)
    return time.perf_counter() - t
out["forty_dataclasses_s"] = made(None)
if msgspec is not None:
    out["forty_structs_s"] = made(msgspec.Struct, frozen=True)
print(json.dumps(out))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=7)
    ap.add_argument("--out")
    args = ap.parse_args()
    samples = [run_child(CHILD) for _ in range(args.processes)]
    emit({"processes": args.processes, "summary": spread(samples), "samples": samples}, args.out)


if __name__ == "__main__":
    main()
