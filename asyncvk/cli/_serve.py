"""``asyncvk serve``: one model or a folder of them, in this process or in worker processes."""

from __future__ import annotations

import argparse
from typing import Any

from ._run import check_cache_folder_args, check_remote_cache_arg


def cmd_serve(args: argparse.Namespace) -> int:
    from ..serve import run_server
    from ..serve._batcher import BatchSettings
    from ._runner import parse_input_shape

    check_cache_folder_args(args)
    check_remote_cache_arg(args)
    models = _served_models(args)
    if args.grpc_port is not None:
        _check_grpc_installed()
    if args.workers > 1:
        if args.port == 0 or args.grpc_port == 0:
            raise ValueError("--workers shares one port: give it (port 0 would pick one each)")
        from ..serve._workers import run_workers

        return run_workers(args.argv, args.workers)
    return run_server(
        models,
        host=args.host,
        port=args.port,
        cache_dir=args.cache_dir,
        graph_key=args.graph_key,
        remote_cache=args.remote_cache,
        device=args.device,
        devices=args.devices,
        max_body=args.max_body,
        warm_up=dict(parse_input_shape(s) for s in args.warm_up),
        body_timeout=args.body_timeout,
        stay_up_on_load_error=args.stay_up_on_load_error,
        access_log=args.access_log,
        max_plans_per_shape=args.max_plans_per_shape,
        idle_plans_per_shape=args.idle_plans_per_shape,
        plan_idle_seconds=args.plan_idle_seconds,
        max_queue=args.max_queue,
        batching=BatchSettings(
            max_batch=args.max_batch,
            max_batch_bytes=args.max_batch_bytes,
            max_queue_delay=args.max_queue_delay_us / 1e6,
            max_queue=max(args.max_queue, 1),
            max_inflight=args.max_inflight,
        ),
        folder=args.models,
        poll_seconds=args.poll_models,
        reuse_port=args.reuse_port,
        warm_up_batches=args.warm_up_batches,
        grpc_port=args.grpc_port,
    )


def _check_grpc_installed() -> None:
    try:
        import google.protobuf  # noqa: F401
        import grpc  # noqa: F401
    except ImportError as exc:
        raise ValueError(
            f"--grpc-port needs grpcio and protobuf ({exc}): pip install asyncvk-runtime[grpc]"
        ) from None


def _served_models(args: argparse.Namespace) -> list[Any]:
    """``PARAM BIN [--name NAME]`` or ``--models DIR``: one of the two."""
    from ..serve._repository import ModelFiles, find_models, name_for

    if not args.poll_models >= 0:
        raise ValueError(f"--poll-models {args.poll_models}: must be 0 (off) or more seconds")
    if args.warm_up_batches and not args.warm_up:
        raise ValueError("--warm-up-batches needs the shapes of --warm-up NAME=C,H,W")
    if args.poll_models and not args.models:
        raise ValueError("--poll-models follows a --models DIR folder: give one")
    if args.models:
        if args.param or args.bin or args.name:
            raise ValueError("--models DIR serves a folder: give no PARAM, BIN or --name with it")
        return find_models(args.models)
    if not args.param or not args.bin:
        raise ValueError("serve needs PARAM and BIN, or --models DIR")
    return [ModelFiles(args.name or name_for(args.param), args.param, args.bin)]
