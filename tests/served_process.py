"""Waiting for an ``asyncvk serve`` process started by a test to answer ready."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time

import aiohttp


async def wait_until_ready(proc: subprocess.Popen[str], url: str, seconds: float = 120) -> None:
    """Until ``url`` answers 200, as a readiness probe would ask it; the process's stderr in
    the failure if it exits first, and a failure after ``seconds`` (a guard, not a measure)."""
    deadline = time.monotonic() + seconds
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        while True:
            assert proc.poll() is None, f"asyncvk serve exited: {proc.communicate()[1]}"
            with contextlib.suppress(aiohttp.ClientConnectionError):
                async with http.get(url) as answer:
                    if answer.status == 200:
                        return
            assert time.monotonic() < deadline, f"{url} not ready in {seconds:g} s"
            await asyncio.sleep(0.05)
