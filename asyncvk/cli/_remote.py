"""``asyncvk cache push / pull``: a cache file to and from the remote cache, for CI that builds
once per GPU and driver and a fleet that starts warm from what it built.

Both run on a machine with the GPU the file is for: ``push`` loads the file as a run would
(every check, on this device) and writes what the store lacks; ``pull`` reads every SPIR-V
entry for this device's macros and its driver blobs, checked as a run checks them, and merges
them into the file. A store that fails is an error here (exit 1), not a quiet miss.
"""

from __future__ import annotations

import argparse
from typing import Any

from ._report import print_report


def _tier(args: argparse.Namespace) -> Any:
    from ..cache._remote_store import parse_remote_url
    from ..cache._remote_tier import RemoteTier, resolve_secret

    return RemoteTier(parse_remote_url(args.remote, where="--remote"), resolve_secret(None))


def _device(index: int | None) -> Any:
    from .._errors import NoDeviceError
    from ..gpu import get_gpu_count, get_gpu_device

    if get_gpu_count() == 0:
        raise NoDeviceError("no Vulkan device: push and pull check values on the device")
    return get_gpu_device(index)


def _finish(tier: Any, report: dict[str, Any]) -> dict[str, Any]:
    """The tier's counters into ``report``; a store that failed is the command's error."""
    status = tier.report()
    if not status["on"]:
        raise OSError(f"--remote {status['url']}: {status['off_reason']}")
    report["remote_cache"] = status
    return report


async def _push(args: argparse.Namespace) -> dict[str, Any]:
    from ..cache._pipeline_cache import PipelineCache

    tier = _tier(args)
    cache = PipelineCache(_device(args.device), read_only=True)
    try:
        result = cache.load_cache(args.file)
        if not result:
            raise ValueError(f"{args.file}: not pushed, this device rejects it: {result.reason}")
        dropped = cache.check_spirv_entries()  # what a run would drop is not shared either
        await tier.publish(cache)
        report = {
            "file": args.file,
            "spirv_entries": len(cache.spirv_entries()),
            "dropped": [*result.skipped, *dropped],
            "driver_blob_bytes": len(cache.driver_blob()),
        }
    finally:
        await tier.aclose()
        await cache.aclose()
    return _finish(tier, report)


def cmd_cache_push(args: argparse.Namespace) -> int:
    import asyncio

    report = asyncio.run(_push(args))

    def text() -> None:
        remote = report["remote_cache"]
        print(
            f"{args.file}: {remote['pushed']} values written to {remote['url']} "
            f"({remote['bytes_written']:,} bytes); {report['spirv_entries']} SPIR-V entries, "
            f"driver blob {report['driver_blob_bytes']:,} bytes"
        )
        for reason in report["dropped"]:
            print(f"  not pushed: {reason}")

    print_report(args, report, text)
    return 0


async def _pull(args: argparse.Namespace) -> dict[str, Any]:
    from ..cache._pipeline_cache import PipelineCache

    tier = _tier(args)
    cache = PipelineCache(_device(args.device))
    try:
        await tier.pull(cache)
        _finish(tier, {})
        saved = await cache.save_cache_async(args.file)
        if not saved:
            raise OSError(f"{args.file}: {saved.reason}")
        report = {
            "file": args.file,
            "spirv_entries": saved.spirv_entries,
            "driver_blob_bytes": saved.driver_blob_bytes,
        }
    finally:
        await tier.aclose()
        await cache.aclose()
    return _finish(tier, report)


def cmd_cache_pull(args: argparse.Namespace) -> int:
    import asyncio

    report = asyncio.run(_pull(args))

    def text() -> None:
        remote = report["remote_cache"]
        print(
            f"{args.file}: {remote['hits']} values from {remote['url']} "
            f"({remote['rejected']} rejected); the file holds {report['spirv_entries']} SPIR-V "
            f"entries and a {report['driver_blob_bytes']:,}-byte driver blob"
        )
        for reason in remote.get("rejections", []):
            print(f"  rejected: {reason}")

    print_report(args, report, text)
    return 0
