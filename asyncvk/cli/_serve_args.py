"""``asyncvk serve``'s arguments."""

from __future__ import annotations

import argparse
from typing import Any

# -- parser -------------------------------------------------------------------------------------
from ._arg_types import count, device_list, host, port, remote_cache_arg
from ._serve import cmd_serve


def add_serve_command(sub: Any) -> None:
    """``serve``: an HTTP inference server for one model or a folder of them."""
    serve = sub.add_parser(
        "serve", help="an HTTP inference server (Open Inference Protocol) for one or more models"
    )
    serve.add_argument("param", nargs="?", help="the model's .param (or --models DIR)")
    serve.add_argument("bin", nargs="?", help="the model's .bin")
    serve.add_argument(
        "--models", metavar="DIR", help="serve every DIR/NAME/model.param + model.bin as NAME"
    )
    serve.add_argument(
        "--name", help="the model's name in URLs (default: the .param's name, or its folder's)"
    )
    serve.add_argument(
        "--workers",
        type=count(1),
        default=1,
        metavar="N",
        help="server processes on the one port (SO_REUSEPORT), each with its own batcher, "
        "sharing the GPU and the cache's files (default: 1)",
    )
    serve.add_argument("--reuse-port", action="store_true", help=argparse.SUPPRESS)
    serve.add_argument(
        "--warm-up-batches",
        action="store_true",
        help="with --warm-up: record the plan of every batch size the batcher makes (powers of "
        "two up to --max-batch) before /ready, so a first burst records none",
    )
    serve.add_argument(
        "--poll-models",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="with --models: load new NAME folders, reload changed models and unload removed "
        "ones this often (default: 0, never; the repository API still loads and unloads)",
    )
    serve.add_argument(
        "--max-batch",
        type=count(1),
        default=32,
        metavar="N",
        help="items that concurrent requests may join into one GPU submission (default: 32)",
    )
    serve.add_argument(
        "--max-batch-bytes",
        type=count(1),
        default=256 << 20,
        metavar="BYTES",
        help="device memory a batch's blobs may take: batches of larger items hold fewer "
        "(default: 256 MiB)",
    )
    serve.add_argument(
        "--max-queue-delay-us",
        type=count(0),
        default=0,
        metavar="US",
        help="microseconds a request may wait for others to join its batch (default: 0: none; "
        "batches still form from what arrives while the GPU is busy)",
    )
    serve.add_argument(
        "--max-inflight",
        type=count(1),
        default=2,
        metavar="N",
        help="batches of one model on the GPU at once (default: 2)",
    )
    serve.add_argument("--host", type=host, default="127.0.0.1")
    serve.add_argument("--port", type=port, default=8080, help="0: any free port")
    serve.add_argument("--cache-dir", metavar="DIR")
    serve.add_argument("--graph-key", metavar="KEY")
    remote_cache_arg(serve)
    devices = serve.add_mutually_exclusive_group()
    devices.add_argument("--device", type=count(0), default=None, help="Vulkan device index")
    devices.add_argument(
        "--devices",
        type=device_list,
        default=None,
        metavar="all|0,1,...",
        help="serve every model on each of these devices (each with its own pipeline cache, "
        "one file per device in --cache-dir), each batch sent to the device that will finish "
        "it first; a device that fails is taken out and its batches go to the others",
    )
    serve.add_argument("--max-body", type=count(1), default=64 << 20, help="bytes per request")
    serve.add_argument(
        "--stay-up-on-load-error",
        action="store_true",
        help="keep serving (/ready answers 500 with the error) when the model fails to load; "
        "by default the process exits with status 1 so that a supervisor restarts it",
    )
    serve.add_argument(
        "--grpc-port",
        type=count(0),
        default=None,
        metavar="PORT",
        help="serve the protocol over gRPC on this port of --host too (0: any free port; "
        "needs grpcio: pip install asyncvk-runtime[grpc])",
    )
    serve.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="one log line per request on stderr (default: off; it costs about 0.15 ms a request)",
    )
    serve.add_argument(
        "--body-timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="a request body not received whole within this time is answered 408",
    )
    serve.add_argument(
        "--warm-up",
        action="append",
        default=[],
        metavar="NAME=C,H,W",
        help="run once on zeros of this shape before /ready: the first request then pays no "
        "plan build or shader compile",
    )
    serve.add_argument(
        "--max-plans-per-shape",
        type=count(1),
        default=4,
        metavar="N",
        help="inferences of one input shape that run at once, each with its own blob memory; "
        "more wait for one to end (default: 4)",
    )
    serve.add_argument(
        "--max-queue",
        type=count(0),
        default=256,
        metavar="N",
        help="requests that may wait per model; beyond it, 503 with Retry-After (default: 256)",
    )
    serve.add_argument(
        "--idle-plans-per-shape",
        type=count(0),
        default=1,
        metavar="N",
        help="plans kept per input shape once a burst is over (default: 1)",
    )
    serve.add_argument(
        "--plan-idle-seconds",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="a plan unused this long is released, with its memory (default: 2)",
    )
    serve.set_defaults(func=cmd_serve, json=False)
