"""The CLI reads a model's weights on a thread at its first lines (``net._weights_prefetch``):
the load takes those bytes only while the file is the one read, and never reads a pipe early."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
from cli_runner import cli, run_args

from asyncvk.net import _weights_prefetch
from asyncvk.net._modelbin import ModelBinReader
from asyncvk.net._weights_prefetch import start_reading, take_early_read

M = Path(__file__).parent / "models" / "cunet"


def _floats(*values: float) -> bytes:
    return np.asarray(values, "<f4").tobytes()


def _read_early(path: Path) -> None:
    """Start the early read and let it finish, so that what the test changes comes after it."""
    start_reading(path)
    _weights_prefetch._reads[os.path.abspath(path)].done.wait()


def test_an_early_read_is_taken_once(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(_floats(1.0, 2.0))
    start_reading(str(path))
    reader = ModelBinReader.open(str(path))
    assert reader.read_early
    np.testing.assert_array_equal(reader.load(2, 1), [1.0, 2.0])
    assert take_early_read(str(path)) is None  # given out once: a second load reads again
    assert not ModelBinReader.open(str(path)).read_early


def test_a_file_changed_after_the_early_read_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(_floats(1.0))
    _read_early(path)
    assert take_early_read(tmp_path / "other.bin") is None  # another path: nothing read
    replacement = tmp_path / "new.bin"
    replacement.write_bytes(_floats(5.0, 6.0))
    os.replace(replacement, path)  # a new inode and size under the same name
    reader = ModelBinReader.open(path)
    assert not reader.read_early
    np.testing.assert_array_equal(reader.load(2, 1), [5.0, 6.0])


def test_a_file_rewritten_in_place_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(_floats(1.0))
    _read_early(path)
    with open(path, "r+b") as f:  # same inode and size, new bytes and times
        f.write(_floats(9.0))
    os.utime(path, ns=(1, 1))
    reader = ModelBinReader.open(path)
    assert not reader.read_early and reader.load(1, 1)[0] == 9.0


def test_a_pipe_is_not_read_early(tmp_path: Path) -> None:
    """Opening a pipe with no writer would block the early read (and the load waiting for it);
    reading one with a writer would leave nothing for the load."""
    fifo = tmp_path / "weights.fifo"
    os.mkfifo(fifo)
    start_reading(fifo)
    assert take_early_read(fifo) is None  # returns: the read did not wait for a writer
    writer = threading.Thread(target=lambda: fifo.write_bytes(_floats(3.0)))
    writer.start()
    with open(fifo, "rb") as f:
        assert f.read() == _floats(3.0)  # every byte still there for the load
    writer.join()


def test_a_pipe_with_a_waiting_writer_is_left_to_the_load(tmp_path: Path) -> None:
    """A writer already blocked in open() must not be released by the early read (it would
    then write into a closed pipe and die)."""
    fifo = tmp_path / "weights.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(_floats(4.0)))
    writer.start()
    start_reading(fifo)
    assert take_early_read(fifo) is None
    with open(fifo, "rb") as f:
        assert f.read() == _floats(4.0)
    writer.join(timeout=10)
    assert not writer.is_alive()


def test_the_cli_run_takes_the_early_read() -> None:
    proc = cli(*run_args(M), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["weights_read_early"] is True
