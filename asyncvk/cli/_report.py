"""How a command reports: JSON or text on stdout, and the user's clock (seconds from the
kernel's start of the process to moments of this run, ``clock`` in run/bench reports)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from ._process_clock import since_process_start


def print_report(args: argparse.Namespace, data: dict[str, Any], text: Callable[[], None]) -> None:
    """JSON (which escapes control characters itself), or ``text()``'s lines made safe for a
    terminal: what they show may come from a file someone else wrote (a device name in a
    cache folder's index), and an escape sequence from it must not reach the terminal."""
    if args.json:
        print(json.dumps(data, indent=2, default=_jsonable))
        return
    import contextlib
    import io
    import sys

    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            text()
    finally:
        sys.stderr.write(terminal_safe(err.getvalue()))
        sys.stdout.write(terminal_safe(out.getvalue()))


def terminal_safe(text: str) -> str:
    """``text`` with every control character but newline and tab written as an escape
    (``\\x1b``), so that nothing read from a file can drive the terminal."""
    if text.isprintable() or all(c.isprintable() or c in "\n\t" for c in text):
        return text
    return "".join(
        c if c.isprintable() or c in "\n\t" else c.encode("unicode_escape").decode("ascii")
        for c in text
    )


def _jsonable(value: Any) -> Any:
    import numpy as np

    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return str(value)


#: Seconds from process start to moments of this run (``clock`` in run/bench reports).
_marks: dict[str, float | None] = {}


def mark(name: str) -> None:
    _marks[name] = since_process_start()


def user_clock(report: dict[str, Any]) -> dict[str, Any]:
    """Process start to each moment, as the user's clock reads it (None off Linux)."""
    mark("exit")
    clock: dict[str, Any] = {
        "process_start_to_first_output_s": _marks.get("first_output"),
        "process_start_to_exit_s": _marks.get("exit"),
        "source": "kernel process start time (/proc/self/stat, 1 clock tick) vs CLOCK_BOOTTIME",
        "first_output_monotonic_s": report.pop("_first_output_monotonic", None),
    }
    moments = (
        "main",
        "instance_created",
        "compiler_ready",
        "imports_done",
        "device_opened",
        "first_output_written",
    )
    for name in moments:
        clock[f"process_start_to_{name}_s"] = _marks.get(name)
    return clock
