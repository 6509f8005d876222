"""A real ``redis-server`` on a free loopback port, for the remote cache tests (no mocks).

The binary comes from the Debian package ``redis-server`` (``tools/install.sh --test``); a test
that needs it and cannot find it fails and says so, as CI installs it.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest
import redis


def free_port() -> int:
    """A loopback port nobody listens on now (so a connection to it is refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One redis-server process: no persistence, loopback only, in its own folder."""

    def __init__(self, folder: Path, *extra: str, password: str | None = None) -> None:
        """``extra``: more of redis-server's options; ``password``: its ``requirepass``."""
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail(
                "redis-server is not installed: the remote cache tests run against a real one "
                "(apt-get install redis-server, or tools/install.sh --test)"
            )
        self.binary = binary
        self.folder = folder
        self.password = password
        self.extra = [*extra, *(("--requirepass", password) if password else ())]
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
                *self.extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:  # ready when it answers PING
            try:
                with self.client() as c:
                    c.ping()
                return
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.02)

    def client(self, db: int = 0) -> redis.Redis:
        """A plain synchronous client, for a test to look at or alter what is stored."""
        return redis.Redis(host="127.0.0.1", port=self.port, db=db, password=self.password)

    def stop(self) -> None:
        """Kill the server at once (SIGKILL): connections break mid-stream."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.process = None
