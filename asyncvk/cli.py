"""The ``asyncvk`` command line. Errors print one line and exit non-zero (``--debug`` for more)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from ._errors import AsyncVkError


def _cmd_info(args: argparse.Namespace) -> int:
    from .gpu import get_default_gpu_index, get_gpu_count, get_gpu_info

    count = get_gpu_count()
    devices = [get_gpu_info(i).as_dict() for i in range(count)]
    default = get_default_gpu_index() if count else None
    if args.json:
        print(json.dumps({"default_device": default, "devices": devices}, indent=2))
        return 0
    if not devices:
        print("no Vulkan device found (install mesa-vulkan-drivers for lavapipe)")
        return 1
    for d in devices:
        mark = "*" if d["index"] == default else " "
        print(f"{mark} [{d['index']}] {d['device_name']} ({d['device_type']})")
        print(f"      driver  {d['driver_name']} {d['driver_info']} (id {d['driver_id']})")
        print(
            f"      api     {d['api_version']}  vendor 0x{d['vendor_id']:04x} "
            f"device 0x{d['device_id']:04x}  uuid {d['pipeline_cache_uuid']}"
        )
        print(
            f"      fp16 storage {d['support_fp16_storage']}  fp16 arith "
            f"{d['support_fp16_arithmetic']}  int8 {d['support_int8_storage']}  "
            f"subgroup {d['subgroup_size']}"
        )
        flags = [k for k, v in d["quirks"].items() if v is True]
        print(f"      quirks  {', '.join(flags) or 'none'}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="asyncvk", description=__doc__)
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="list Vulkan devices, capabilities and quirks")
    info.add_argument("--json", action="store_true")
    info.set_defaults(func=_cmd_info)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except (AsyncVkError, OSError, ValueError) as exc:
        if args.debug:
            raise
        print(f"asyncvk: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
