"""PoolStatistics: what a plan pool holds at one moment, for metrics and tests."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PoolStatistics:
    """The pool at one moment, over all its shapes (``peak_plans``: of one shape, ever)."""

    plans: int  #: made and not released: lent, idle or being built
    lent: int
    idle: int
    building: int
    waiting: int  #: extractions waiting for a plan
    peak_plans: int  #: the most plans one shape has held at once
    built: int  #: plans made since the pool was
    released: int  #: plans released since the pool was
    renewed: int = 0  #: plans recorded again off the request path after pipelines came
