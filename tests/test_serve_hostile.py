"""``asyncvk serve`` against malformed and hostile requests: a real server process, real HTTP
(aiohttp's client, or raw sockets for slow bodies and disconnects). Every case answers a 4xx with
a one-line JSON message, or, for a client that left, nothing; none leaves a traceback or a 500.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from numpy.lib import format as npy_format

MODEL = Path(__file__).parent / "models" / "cunet"
TIMEOUT = aiohttp.ClientTimeout(total=30)
# one cunet input (3x44x44 float32) is 23,232 bytes: a 3x60x60 one (43,200) is over this limit
INPUT_LIMIT = 30_000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``asyncvk serve`` on cunet with a 1 s body timeout; its stderr goes to a file, so a test
    can read the log while the server runs."""

    def __init__(self, log: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._log_file = log.open("w")
        env = dict(os.environ, ASYNCVK_MAX_INPUT_BYTES=str(INPUT_LIMIT))
        model = [str(MODEL / "model.param"), str(MODEL / "model.bin")]
        args = ["--port", str(self.port), "--body-timeout", "1", "--max-body", "2000000"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "asyncvk", "serve", *model, *args],
            stdout=subprocess.DEVNULL,
            stderr=self._log_file,
            env=env,
        )

    async def wait_ready(self) -> None:
        deadline = time.monotonic() + 60
        async with aiohttp.ClientSession(timeout=TIMEOUT) as http:
            while time.monotonic() < deadline:
                try:
                    async with http.get(f"{self.url}/ready") as r:
                        if r.status == 200:
                            return
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.05)
        raise AssertionError(f"not ready in time:\n{self.log.read_text()}")

    async def post(self, body: bytes, kind: str) -> tuple[int, dict[str, Any]]:
        async with (
            aiohttp.ClientSession(timeout=TIMEOUT) as http,
            http.post(f"{self.url}/infer", data=body, headers={"Content-Type": kind}) as r,
        ):
            body = await r.read()
            return r.status, json.loads(body) if r.content_type == "application/json" else {}

    async def metrics(self) -> dict[str, float]:
        async with (
            aiohttp.ClientSession(timeout=TIMEOUT) as http,
            http.get(f"{self.url}/metrics") as r,
        ):
            text = await r.text()
        return {
            line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line and not line.startswith("#")
        }

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)  # aiohttp's own shutdown timeout is 60 s
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._log_file.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = Server(tmp_path_factory.mktemp("serve") / "server.log")
    try:
        asyncio.run(running.wait_ready())
        yield running
    finally:
        running.stop()


@pytest.fixture(autouse=True)
def _no_traceback_in_the_log(request: pytest.FixtureRequest) -> Iterator[None]:
    """What the shared server logged during this test holds no traceback."""
    if "server" not in request.fixturenames:
        yield
        return
    log = request.getfixturevalue("server").log
    start = len(log.read_text())
    yield
    during = log.read_text()[start:]
    assert "Traceback" not in during, during


def _npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


def _npy_claiming(shape: tuple[int, ...], size: int = 4096) -> bytes:
    """A .npy of ``size`` bytes whose header declares a float32 array of ``shape``."""
    buf = io.BytesIO()
    npy_format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
    header = buf.getvalue()
    return header + bytes(size - len(header))


def _request_head(length: int, kind: str = "application/x-npy") -> bytes:
    return (
        f"POST /infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {kind}\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def _connect(server: Server) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=30)


def _read_response(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    """One HTTP response from a raw socket the server closes after it."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


async def test_a_npy_header_that_claims_more_than_the_body_holds_is_400(server: Server) -> None:
    status, body = await server.post(_npy_claiming((3, 100000, 100000)), "application/x-npy")
    assert status == 400, body
    assert body["error"] == (
        "in0: header declares shape (3, 100000, 100000) float32 = 112 GiB "
        "but the body holds 4,096 bytes"
    )


async def test_a_multipart_part_that_claims_more_than_it_holds_is_400(server: Server) -> None:
    form = aiohttp.FormData()
    form.add_field("in0", _npy_claiming((3, 100000, 100000)), filename="in0.npy")
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT) as http,
        http.post(f"{server.url}/infer", data=form) as r,
    ):
        assert r.status == 400
        assert "but the part holds 4,096 bytes" in (await r.json())["error"]


async def test_a_npy_over_the_input_limit_is_413(server: Server) -> None:
    status, body = await server.post(_npy(np.zeros((3, 60, 60), np.float32)), "application/x-npy")
    assert status == 413, body
    assert body["error"] == (
        "in0: shape (3, 60, 60) float32 needs 42.2 KiB, over the 29.3 KiB input limit "
        "(ASYNCVK_MAX_INPUT_BYTES)"
    )
    ok, _ = await server.post(_npy(np.load(MODEL / "input.npy")), "application/x-npy")
    assert ok == 200  # under the limit: served as before


async def test_json_nested_deeply_is_400(server: Server) -> None:
    deep = b'{"inputs": {"in0": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    status, body = await server.post(deep, "application/json")
    assert status == 400, body
    assert "nested too deeply" in str(body["error"])


@pytest.mark.parametrize(
    ("literal", "needle"),
    [
        ("NaN", "holds NaN"),
        ("Infinity", "holds Infinity"),
        ("-Infinity", "holds -Infinity"),
        ("1e39", "beyond float32's range"),
    ],
)
async def test_json_input_with_non_finite_numbers_is_400(
    server: Server, literal: str, needle: str
) -> None:
    rows = np.load(MODEL / "input.npy").tolist()
    rows[1][2][3] = "PLACEHOLDER"
    body = json.dumps({"inputs": {"in0": rows}}).replace('"PLACEHOLDER"', literal).encode()
    status, reply = await server.post(body, "application/json")
    assert status == 400, reply
    assert needle in str(reply["error"])


async def test_non_finite_outputs_are_null_in_a_json_reply(server: Server) -> None:
    x = np.load(MODEL / "input.npy")
    huge = (np.sign(x - x.mean()) * 3e38).astype(np.float32)  # finite, but cunet overflows
    status, reply = await server.post(
        json.dumps({"inputs": {"in0": huge.tolist()}}).encode(), "application/json"
    )
    assert status == 200, reply
    values = np.asarray(reply["outputs"]["out0"], dtype=object)
    assert reply["non_finite"] == values.size == np.count_nonzero(values == None)  # noqa: E711
    status, reply = await server.post(
        json.dumps({"inputs": {"in0": x.tolist()}}).encode(), "application/json"
    )
    assert status == 200 and reply["non_finite"] == 0


async def test_a_client_that_leaves_mid_body_is_no_error(server: Server) -> None:
    body = _npy(np.load(MODEL / "input.npy"))
    before = await server.metrics()
    clients = []
    for _ in range(5):
        sock = _connect(server)
        sock.sendall(_request_head(len(body)) + body[: len(body) // 2])
        clients.append(sock)
    await asyncio.sleep(0.3)  # let the server start reading the bodies
    for sock in clients:
        sock.close()
    deadline = time.monotonic() + 30
    while True:
        after = await server.metrics()
        key = "asyncvk_client_disconnects_total"
        gone = after[key] - before[key]
        if gone == 5 or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    assert after.get('asyncvk_requests_total{code="500"}', 0) == 0
    assert gone == 5
    # the no-traceback check runs after every test (_no_traceback_in_the_log)


async def test_a_body_that_never_finishes_is_408_and_closed(server: Server) -> None:
    with _connect(server) as sock:
        sock.sendall(_request_head(1000) + b"\x93NUMPY")
        status, body = await asyncio.to_thread(_read_response, sock)
    assert status == 408
    assert body["error"] == "request body not received within 1 s (server --body-timeout)"


def test_shutdown_does_not_wait_for_stalled_bodies(tmp_path: Path) -> None:
    stalled = Server(tmp_path / "server.log")
    clients: list[socket.socket] = []
    try:
        asyncio.run(stalled.wait_ready())
        clients = [_connect(stalled) for _ in range(10)]
        for sock in clients:
            sock.sendall(_request_head(1000) + b"\x93NUMPY")
        time.sleep(0.3)  # let the server start reading the bodies
        assert stalled.stop() == 0  # SIGTERM; before a body timeout it waited out aiohttp's 60 s
        answers = [_read_response(sock)[0] for sock in clients]
        assert answers == [408] * 10
    finally:
        stalled.stop()
        for sock in clients:
            sock.close()
    assert "Traceback" not in stalled.log.read_text()


def _exchange(server: Server, request: bytes) -> bytes:
    """Send ``request`` on a raw socket; what the server answers before it closes."""
    with _connect(server) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return data


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"POST /infer HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        b"POST /infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"POST /infer HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 10000 + b"\r\n\r\n",
    ],
    ids=["content-length", "chunk-size", "long-header"],
)
def test_malformed_http_is_400_without_a_traceback(server: Server, request_bytes: bytes) -> None:
    reply = _exchange(server, request_bytes)
    assert reply.startswith(b"HTTP/1.0 400 Bad Request"), reply[:200]


def test_malformed_multipart_headers_are_400_not_a_disconnect(server: Server) -> None:
    body = b"--zz\r\nnot a header\r\n\r\n\r\n"
    head = (
        "POST /infer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        f"Content-Type: multipart/form-data; boundary=zz\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    reply = _exchange(server, head.encode() + body)
    status, _, rest = reply.partition(b"\r\n\r\n")
    assert status.startswith(b"HTTP/1.1 400"), reply[:200]
    assert json.loads(rest)["error"] == "a part: 400, message: Invalid HTTP header: b'not a header'"


# --max-body bounds the whole request (2,000,000 bytes here), after decoding, over every part


def _pid_hwm(server: Server) -> int:
    """The server's peak RSS so far (VmHWM), in bytes."""
    with open(f"/proc/{server.proc.pid}/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def _multipart(parts: list[tuple[str, bytes]], boundary: str = "b0undary") -> tuple[bytes, str]:
    body = b""
    for name, data in parts:
        body += (
            (
                f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; '
                f'filename="{name}.npy"\r\nContent-Type: application/x-npy\r\n\r\n'
            ).encode()
            + data
            + b"\r\n"
        )
    return body + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


async def _post_raw(
    server: Server, body: bytes, headers: dict[str, str]
) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession(timeout=TIMEOUT, auto_decompress=False) as http,
        http.post(f"{server.url}/infer", data=body, headers=headers) as r,
    ):
        return r.status, await r.json()


async def test_a_gzip_multipart_that_decodes_past_max_body_is_413_without_reading_it(
    server: Server,
) -> None:
    """A 100 KiB gzip body that decodes to 100 MB: refused at the first 2 MB, and the server
    grows by no more than the limit's order (it read 100 MB before, and answered 200)."""
    part = _npy(np.load(MODEL / "input.npy")) + bytes(100_000_000)
    body, kind = _multipart([("in0", part)])
    packed = gzip.compress(body, compresslevel=6)
    assert len(packed) < 200_000
    before = _pid_hwm(server)
    status, reply = await _post_raw(
        server, packed, {"Content-Type": kind, "Content-Encoding": "gzip"}
    )
    assert status == 413, reply
    assert reply["error"] == (
        "request body over 2,000,000 bytes decoded from gzip (server --max-body) "
        "while reading part 'in0'"
    )
    assert _pid_hwm(server) - before < 50_000_000


async def test_a_gzip_npy_body_that_decodes_past_max_body_is_413(server: Server) -> None:
    packed = gzip.compress(_npy(np.zeros((3, 1000, 1000), np.float32)))
    status, reply = await _post_raw(
        server, packed, {"Content-Type": "application/x-npy", "Content-Encoding": "gzip"}
    )
    assert status == 413, reply
    assert reply["error"] == (
        "request body over 2,000,000 bytes decoded from gzip (server --max-body) "
        "while reading the body"
    )


async def test_a_content_length_over_max_body_is_413_before_the_body(server: Server) -> None:
    """Only the head is sent: the answer comes without waiting for the body (which would be
    a 408 after the 1 s body timeout)."""
    with _connect(server) as sock:
        sock.sendall(_request_head(1_000_000_000))
        status, body = await asyncio.to_thread(_read_one_response, sock)
    assert status == 413
    assert body["error"] == (
        "request body over 2,000,000 bytes (server --max-body) (Content-Length: 1,000,000,000)"
    )


def _read_one_response(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    """One HTTP response with a Content-Length, from a raw socket the server may keep open
    (it reads and drops what the client still sends for a while)."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.lower().split(b"\r\n")
        if line.startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return int(head.split()[1]), json.loads(body)


def _head_with_expect(length: int) -> bytes:
    return _request_head(length).replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n")


def test_expect_100_continue_over_max_body_is_413_before_continue(server: Server) -> None:
    with _connect(server) as sock:
        sock.sendall(_head_with_expect(1_000_000_000))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 413 "), data[:200]
    assert b"100 Continue" not in data
    assert json.loads(data.partition(b"\r\n\r\n")[2])["error"] == (
        "request body over 2,000,000 bytes (server --max-body) (Content-Length: 1,000,000,000)"
    )


def test_expect_100_continue_under_max_body_continues(server: Server) -> None:
    body = _npy(np.load(MODEL / "input.npy"))
    with _connect(server) as sock:
        sock.sendall(_head_with_expect(len(body)))
        assert sock.recv(65536) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        reply = sock.recv(65536)
    assert reply.startswith(b"HTTP/1.1 200 OK"), reply[:200]


async def test_a_npy_body_with_trailing_data_is_400(server: Server) -> None:
    x = np.load(MODEL / "input.npy")
    status, body = await server.post(_npy(x) + bytes(1_000_000), "application/x-npy")
    assert status == 400, body
    assert body["error"] == (
        "in0: the body holds 1,000,000 bytes after the array (its header declares shape "
        "(3, 44, 44) float32, 23,360 bytes with the header; the body is 1,023,360)"
    )


async def test_a_multipart_part_with_trailing_data_is_400_naming_it(server: Server) -> None:
    body, kind = _multipart([("in0", _npy(np.load(MODEL / "input.npy")) + b"junk")])
    status, reply = await server.post(body, kind)
    assert status == 400, reply
    assert reply["error"].startswith("in0: the part holds 4 bytes after the array")


@pytest.mark.parametrize(
    ("parts", "needle"),
    [
        ([("nope", b"x")], "unknown input 'nope' (inputs: ['in0'])"),
        ([("in0", b"x"), ("in0", b"y")], "input 'in0' sent twice (one part per input)"),
    ],
)
async def test_multipart_names_are_checked_before_parts_are_read(
    server: Server, parts: list[tuple[str, bytes]], needle: str
) -> None:
    inp = _npy(np.load(MODEL / "input.npy"))
    parts = [(name, inp if data == b"x" else data) for name, data in parts]
    body, kind = _multipart(parts)
    status, reply = await server.post(body, kind)
    assert status == 400, reply
    assert reply["error"] == needle
