"""OS errors reach a command-line user as ``PATH: what went wrong``, never ``[Errno N]``."""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

import pytest
from cli_runner import cli

from asyncvk.cli._os_words import describe_os_error

CUNET = Path(__file__).parent / "models" / "cunet"


def test_a_missing_model_and_a_folder_for_a_file(tmp_path: Path) -> None:
    missing = cli("run", str(tmp_path / "nope.param"), str(tmp_path / "nope.bin"))
    assert missing.returncode == 1
    assert missing.stderr == f"asyncvk: error: {tmp_path / 'nope.param'}: no such file or folder\n"
    folder = cli("run", str(CUNET / "model.param"), str(tmp_path))
    assert folder.returncode == 1
    assert folder.stderr.endswith(f"asyncvk: error: {tmp_path}: is a folder, not a file\n")


def test_a_port_in_use_names_the_address_and_the_fix() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = cli(
            "serve", str(CUNET / "model.param"), str(CUNET / "model.bin"), "--port", str(port)
        )
    assert proc.returncode == 1
    assert proc.stderr.endswith(
        f"asyncvk: error: 127.0.0.1:{port}: the address is in use: another process listens "
        "there (try another --port)\n"
    ), proc.stderr
    assert "Errno" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (errno.ENOSPC, "/data/x.vkcache: no space left on the device"),
        (errno.EROFS, "/data/x.vkcache: the file system is read-only"),
        (errno.EACCES, "/data/x.vkcache: permission denied: this user may not open it"),
        (errno.ENOTDIR, "/data/x.vkcache: a part of the path is not a folder"),
        (errno.EXDEV, "/data/x.vkcache: invalid cross-device link"),  # no words of ours: Python's
    ],
)
def test_os_errors_in_words(code: int, words: str) -> None:
    assert describe_os_error(OSError(code, os.strerror(code), "/data/x.vkcache")) == words


def test_an_error_with_a_message_of_its_own_is_that_message() -> None:
    assert describe_os_error(OSError("cache.vk: saved nothing")) == "cache.vk: saved nothing"
    renamed = OSError(errno.ENOENT, os.strerror(errno.ENOENT), "a.tmp", None, "b")
    assert describe_os_error(renamed) == "a.tmp -> b: no such file or folder"
