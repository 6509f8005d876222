"""PlanPool: the plans of one GpuModel, a few per input shape, lent to one extraction at a time.

A plan's arena holds one inference's blobs, so concurrent extractions of one shape each need a
plan: up to ``max_per_shape`` are made, and further extractions wait for one to come back.
Plans of at most ``max_shapes`` shapes are kept; a new shape drops the idle plans of the oldest.
A plan recorded before the model adopted a background pipeline is dropped when it comes back, so
the next extraction records one that can use it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from .._threads import run_sync
from ._plan import Plan, Shape

#: (target blob, sorted (input blob, shape) pairs): what a plan was made for
PlanKey = tuple[int, tuple[tuple[int, Shape], ...]]


def plan_key(shapes: dict[int, Shape], target: int) -> PlanKey:
    return (target, tuple(sorted(shapes.items())))


class PlanPool:
    """Plans by :data:`PlanKey`; ``build`` makes one (on a worker thread: it records)."""

    def __init__(
        self,
        build: Callable[[dict[int, Shape], int], Plan],
        *,
        max_per_shape: int,
        max_shapes: int = 8,
        version: Callable[[], int] = lambda: 0,
    ) -> None:
        self._build = build
        self._version = version
        self._max_per_shape = max_per_shape
        self._max_shapes = max_shapes
        #: Every plan made, lent or idle, by key.
        self.plans: dict[PlanKey, list[Plan]] = {}
        self._idle: dict[PlanKey, list[Plan]] = {}
        self._cond: asyncio.Condition | None = None

    async def acquire(self, shapes: dict[int, Shape], target: int) -> Plan:
        """An idle plan for these shapes, a new one, or the first one given back."""
        if self._cond is None:
            self._cond = asyncio.Condition()
        key = plan_key(shapes, target)
        async with self._cond:
            while True:
                idle = self._idle.setdefault(key, [])
                while idle and not self._current(idle[-1]):
                    stale = idle.pop()  # recorded before a background pipeline was adopted
                    self.plans[key].remove(stale)
                    stale.release()
                if idle:
                    return idle.pop()
                plans = self.plans.setdefault(key, [])
                if len(plans) < self._max_per_shape:
                    break
                await self._cond.wait()
            self._evict_other_shapes(key)
        plan = await run_sync(lambda: self._build(shapes, target))
        self.plans.setdefault(key, []).append(plan)
        return plan

    async def give_back(self, plan: Plan) -> None:
        """Return a plan from :meth:`acquire`; one the pool no longer holds is released."""
        assert self._cond is not None
        key = plan_key(plan.input_shapes, plan.target)
        async with self._cond:
            plans = self.plans.get(key, [])
            if plan in plans and self._current(plan):
                self._idle.setdefault(key, []).append(plan)
            else:  # evicted, or recorded before a background pipeline was adopted
                if plan in plans:
                    plans.remove(plan)
                plan.release()
            self._cond.notify()

    def _current(self, plan: Plan) -> bool:
        """Whether ``plan`` was recorded with every pipeline the model has adopted."""
        return plan.pipelines_version == self._version()

    def _evict_other_shapes(self, keep: PlanKey) -> None:
        """Keep plans for at most ``max_shapes`` shapes: drop idle plans of the oldest."""
        while len(self.plans) >= self._max_shapes:
            for key in list(self.plans):
                if key != keep and len(self._idle.get(key, [])) == len(self.plans[key]):
                    for plan in self.plans.pop(key):
                        plan.release()
                    self._idle.pop(key, None)
                    break
            else:
                return

    def release(self) -> None:
        """Release every plan, lent ones included (their extractions must be over)."""
        for plans in self.plans.values():
            for plan in plans:
                plan.release()
        self.plans.clear()
        self._idle.clear()
