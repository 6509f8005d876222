"""Progress for long command-line work: rich's live bars on a terminal, nothing elsewhere.

A first inference on lavapipe compiles every shader at its first dispatch (seconds, with no
count to show), and a ``bench`` runs for as long as its loops take: without a sign of life a
user cannot tell work from a hang. Bars go to stderr, only when it is a terminal and ``--quiet``
was not given, so pipes, files and ``--json`` consumers never see them; rich is imported only
then, so scripted runs pay nothing for it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class Progress:
    """One live display for one command; ``step`` adds a line per phase."""

    def __init__(self, enabled: bool) -> None:
        self._live: Any = None
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                SpinnerColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.progress import Progress as LiveProgress

            self._live = LiveProgress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,  # the command's own report replaces the bars
            )
            self._live.start()

    @classmethod
    def for_terminal(cls, quiet: bool) -> Progress:
        """Enabled when stderr is a terminal and the user did not ask for quiet."""
        return cls(enabled=not quiet and sys.stderr.isatty())

    @property
    def enabled(self) -> bool:
        return self._live is not None

    def counter(self, description: str) -> Callable[[int, int], None] | None:
        """A ``(done, total)`` callback drawing one bar (``Net.load_model``'s ``progress``)."""
        if self._live is None:
            return None
        live = self._live
        task = live.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            live.update(task, completed=done, total=max(total, 1))

        return update

    @contextmanager
    def step(self, description: str, total: int | None = None) -> Iterator[Callable[[], None]]:
        """A line for one phase: a spinner with the time elapsed, and a bar when ``total`` is
        known (call the yielded function once per unit done). The line goes when it ends."""
        if self._live is None:
            yield lambda: None
            return
        live = self._live
        task = live.add_task(description, total=total)
        try:
            yield lambda: live.advance(task)
        finally:
            live.remove_task(task)

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the display (idempotent); call before printing the command's report."""
        if self._live is not None:
            self._live.stop()
            self._live = None
