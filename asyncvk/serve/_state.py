"""What the server keeps beside its models: load progress and the counters ``/metrics``
reports, and the keys the app holds them under."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from aiohttp import web

from ..net._net import Net

BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: requests that may wait, per model (serve --max-queue): beyond it, 503
MAX_QUEUE = 256
#: seconds a client told 503 (a full queue) is asked to wait before trying again
RETRY_AFTER = 1


#: seconds calls in flight over gRPC may take to finish at shutdown
GRPC_GRACE = 5.0


class ServerState:
    """Load progress and Prometheus counters."""

    def __init__(self) -> None:
        self.loading: asyncio.Task[None] | None = None
        self.polling: asyncio.Task[None] | None = None
        #: the gRPC server (``grpc_address``) and the port it listens on
        self.grpc: Any = None
        self.grpc_port: int | None = None
        self.ready = False
        self.error: str | None = None
        self.load_seconds = 0.0
        self.warm_up_seconds = 0.0
        self.codes: Counter[int] = Counter()
        self.buckets = [0] * len(BUCKETS)
        self.latency_sum = 0.0
        self.latency_count = 0
        self.disconnects = 0
        #: The process's exit status when loading failed and the server shut itself down.
        self.exit_code = 0

    def observe(self, seconds: float) -> None:
        self.latency_sum += seconds
        self.latency_count += 1
        for i, bound in enumerate(BUCKETS):
            if seconds <= bound:
                self.buckets[i] += 1


NET_KEY: web.AppKey[Net] = web.AppKey("net", Net)
STATE_KEY: web.AppKey[ServerState] = web.AppKey("state", ServerState)
