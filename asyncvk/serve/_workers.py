"""Worker processes: ``serve --workers N`` runs N server processes on one port.

One process's event loop holds the GIL for every request's HTTP parsing, tensor conversion and
reply, so past a few thousand requests a second it, not the GPU, is the limit. Each worker is
a whole server (``asyncvk serve`` again, with ``--reuse-port``): the kernel spreads incoming
connections over the workers' sockets (``SO_REUSEPORT``). The workers share the GPU the way
any processes do (each has its own Vulkan device and queue; the driver interleaves their
submissions) and share the pipeline cache through its files: the cache folder and the remote
tier take concurrent readers and writers, so the first worker to build a pipeline saves it for
the rest and for the next start. Each worker batches its own requests and answers ``/metrics``
for itself.

The parent only watches: it forwards SIGTERM and SIGINT to the workers and, when one exits
with an error (a model that failed to load), stops the others and exits with its status.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from types import FrameType


def without_workers(argv: Sequence[str]) -> list[str]:
    """``argv`` less its ``--workers N`` (or ``--workers=N``)."""
    out: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--workers":
            skip = True
        elif not arg.startswith("--workers="):
            out.append(arg)
    return out


def run_workers(argv: Sequence[str], workers: int) -> int:
    """Run ``asyncvk ARGV --reuse-port`` in ``workers`` processes until they end; their exit
    status (the first error's)."""
    command = [sys.executable, "-m", "asyncvk", *without_workers(argv), "--reuse-port"]
    children = [subprocess.Popen(command) for _ in range(workers)]

    def forward(signum: int, frame: FrameType | None) -> None:
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    status = 0
    while any(child.poll() is None for child in children):
        for child in children:
            code = child.poll()
            if code not in (None, 0) and status == 0:
                status = code
                forward(signal.SIGTERM, None)  # one failed: the server is not whole
        time.sleep(0.2)
    for child in children:
        if child.returncode not in (0, -signal.SIGTERM, -signal.SIGINT) and status == 0:
            status = child.returncode
    return status
