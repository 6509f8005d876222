"""``asyncvk info`` and ``asyncvk layers``: what this machine's devices and asyncvk offer."""

from __future__ import annotations

import argparse
import sys

from ._report import print_report


def cmd_info(args: argparse.Namespace) -> int:
    from ..gpu import get_default_gpu_index, get_gpu_count, get_gpu_info
    from ..gpu._instance import NO_DRIVER_FIX
    from ..shader._packaged import packaged_state

    count = get_gpu_count()
    devices = [get_gpu_info(i).as_dict() for i in range(count)]
    default = get_default_gpu_index() if count else None
    packaged = packaged_state()

    def text() -> None:
        if not devices:
            print(f"no Vulkan device found: {NO_DRIVER_FIX}")
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
        built = packaged["shaders"]
        state = "not built" if built is None else f"{built} shaders"
        if built is not None and not packaged["complete"]:
            state += " (not every shader compiled)"
        if not packaged["enabled"]:
            state += ", off (ASYNCVK_PACKAGED_SPIRV)"
        print(f"packaged SPIR-V  {state}  {packaged['folder']}")

    report = {"default_device": default, "devices": devices, "packaged_spirv": packaged}
    print_report(args, report, text)
    return 0 if devices or args.json else 1


def cmd_layers(args: argparse.Namespace) -> int:
    from ..layers._catalog import layer_catalog, layers_markdown, layers_text

    infos = layer_catalog()
    if args.markdown:
        sys.stdout.write(layers_markdown(infos))
        return 0
    data = {"count": len(infos), "layers": [info.as_json() for info in infos]}
    print_report(args, data, lambda: print(layers_text(infos), end=""))
    return 0
