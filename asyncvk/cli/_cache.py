"""``asyncvk cache inspect / verify / ls / prune``: what a cache file or folder holds, and what
this machine makes of it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ._report import print_report


def cmd_cache_inspect(args: argparse.Namespace) -> int:
    from ..cache._file_inspect import describe_cache, read_cache_source

    data = read_cache_source(args.file)
    if not isinstance(data, bytes):
        raise ValueError(f"{args.file}: {data.reason}")
    try:
        info = describe_cache(data)
    except ValueError as exc:
        raise ValueError(f"{args.file}: not a readable asyncvk cache file: {exc}") from None
    info["this_device"] = _verify(args.file, args.device)
    print_report(args, info, lambda: _print_inspection(args.file, info))
    return 0 if info["valid"] else 1


def _print_inspection(path: str, info: dict[str, Any]) -> None:
    """``cache inspect`` for people: what the file holds and what this machine makes of it."""
    h = info["header"]
    state = "valid" if info["valid"] else f"INVALID: {info['reason']}"
    version = f"format {h['format_version']}, asyncvk {h['asyncvk_version']}"
    print(f"{path}: asyncvk pipeline cache ({version}), {info['size']:,} bytes")
    print(f"  status       {state}")
    here = info["this_device"].get("device")
    if here and here.get("device_name_hash") == h["device_name_hash"]:
        device = f"{here['name']} ({here['driver']}) - this machine's device"
    else:
        device = f"vendor 0x{h['vendor_id']:04x} device 0x{h['device_id']:04x} (not this machine's)"
    print(f"  device       {device}, driver version {h['driver_version']}")
    entries = info["spirv_entries"]
    damaged = [e for e in entries if e["status"] != "ok"]
    shaders = ", ".join(sorted({e["shader"] for e in entries})[:8]) or "none"
    more = f", {len(damaged)} damaged" if damaged else ""
    print(f"  SPIR-V       {len(entries)} entries{more}, {h['bodies_size']:,} bytes ({shaders})")
    print(f"  driver blob  {info['driver_blob_bytes']:,} bytes")
    print(f"  on this machine: {_verdict_words(info['this_device'])}")


def _verdict_words(verdict: dict[str, Any]) -> str:
    """What a run on this machine would do with the file, in one plain sentence."""
    if verdict["accepted"]:
        return f"accepted: all {verdict['entries_used']} SPIR-V entries will be used"
    if verdict.get("loaded"):
        return (
            f"usable in part: {verdict['entries_used']} SPIR-V entries will be used, "
            f"{verdict['entries_skipped']} rebuilt from source"
        )
    return f"not usable ({verdict['reason']}): every pipeline will be built from source"


def _verify(path: str, device_index: int | None) -> dict[str, Any]:
    from ..cache._pipeline_cache import PipelineCache
    from ..gpu import get_gpu_count, get_gpu_device

    if get_gpu_count() == 0:
        return {"accepted": False, "loaded": False, "reason": "no Vulkan device"}
    from ..gpu._identity import name_hash

    device = get_gpu_device(device_index)
    info = device.info
    here = {
        "name": info.device_name,
        "driver": f"{info.driver_name} {info.driver_info}".strip(),
        "device_name_hash": f"{name_hash(info.device_name):016x}",  # as inspect shows it
    }
    with PipelineCache(device, read_only=True) as cache:
        result = cache.load_cache(path)
        # what a run would find at first use: a body that is not the shader its key names
        problems = cache.check_spirv_entries() if result else []
        accepted = bool(result) and result.entries_skipped == 0 and not problems
        return {
            "accepted": accepted,
            "loaded": bool(result),
            "device": here,
            "reason": f"SPIR-V entries a run would drop: {len(problems)}"
            if problems
            else result.reason,
            "entries_used": result.entries_used - len(problems),
            "entries_skipped": result.entries_skipped + len(problems),
            "skipped": [*result.skipped, *problems],
        }


def cmd_cache_verify(args: argparse.Namespace) -> int:
    verdict = _verify(args.file, args.device)

    def text() -> None:
        print(f"{args.file}: {_verdict_words(verdict)}")
        if verdict.get("loaded"):
            for reason in verdict.get("skipped", []):
                print(f"  rebuilt: {reason}")

    print_report(args, verdict, text)
    return 0 if verdict["accepted"] else 1


def cmd_cache_ls(args: argparse.Namespace) -> int:
    import time as _time

    from ..cache._directory import CacheDirectory

    directory = CacheDirectory(args.dir, read_only=True)
    if not directory.path.is_dir():
        what = "a file" if directory.path.exists() else "no such folder"
        raise FileNotFoundError(f"{args.dir} is not a cache folder ({what})")
    rows: list[dict[str, Any]] = []
    for key in directory.keys():
        for e in directory.entries(key):
            rows.append(
                {
                    "graph_key": e.graph_key,
                    "file": e.file,
                    "device": e.device,
                    "size": e.size,
                    "age_s": round(_time.time() - e.created, 1),
                    "last_used_s": round(_time.time() - e.last_used, 1),
                    "asyncvk_version": e.asyncvk_version,
                    "model_fingerprint": e.model_fingerprint,
                }
            )

    def text() -> None:
        for problem in directory.problems:
            print(f"warning: {problem}", file=sys.stderr)
        if not rows:
            print(f"{args.dir}: no cache entries")
        for r in rows:
            dev = r["device"]
            print(
                f"{r['graph_key']:<24} {dev.get('device_name') or hex(dev['vendor_id'])}"
                f" driver {dev['driver_version']}  {r['size']:>9} B  "
                f"age {r['age_s']:.0f}s  {r['file']}"
            )

    print_report(args, {"dir": args.dir, "entries": rows, "problems": directory.problems}, text)
    return 0


def cmd_cache_prune(args: argparse.Namespace) -> int:
    from ..cache._directory import DEFAULT_MAX_BYTES, CacheDirectory

    directory = CacheDirectory(args.dir, max_bytes=args.max_bytes or DEFAULT_MAX_BYTES)
    result = directory.prune()

    def text() -> None:
        for problem in result["problems"]:
            print(f"warning: {problem}", file=sys.stderr)
        for name in result["removed"]:
            print(f"removed {name}")
        if result["left"]:
            print(f"left alone (not asyncvk's): {', '.join(result['left'])}")
        print(f"removed {result['removed_files']} file(s)")

    print_report(args, result, text)
    return 0
