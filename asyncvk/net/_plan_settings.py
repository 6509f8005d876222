"""The plan pool's settings checked where they are given (``Option``, the server's flags), so
that a bad one is refused before a model loads."""

from __future__ import annotations


def check_settings(
    max_per_shape: int, min_idle: int, idle_seconds: float, max_waiting: int | None
) -> None:
    """ValueError naming the ``Option`` field that a pool cannot work with."""
    if max_per_shape < 1:
        raise ValueError(f"max_plans_per_shape must be at least 1, got {max_per_shape}")
    if not 0 <= min_idle <= max_per_shape:
        raise ValueError(
            f"idle_plans_per_shape must be from 0 to max_plans_per_shape ({max_per_shape}), "
            f"got {min_idle}"
        )
    if not idle_seconds >= 0:
        raise ValueError(f"plan_idle_seconds must be 0 or more, got {idle_seconds}")
    if max_waiting is not None and max_waiting < 0:
        raise ValueError(f"max_waiting_per_shape must be 0 or more, got {max_waiting}")
