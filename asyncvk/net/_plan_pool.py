"""PlanPool: the plans of one GpuModel, a few per request, lent to one extraction at a time.

A plan's arena holds one inference's blobs, so concurrent extractions of one request (input
shapes, outputs and batch: "shape" below) each need a plan. Up to ``max_per_shape`` are made,
counting those still being built (a burst that arrives before the first plan is recorded must
not make one plan per request); further extractions wait for one to come back and get it in
arrival order. With ``max_waiting``, an extraction that finds
that many already waiting is refused (:class:`PlanQueueFull`) rather than queued.

What a burst took is given back after it: a plan idle for ``idle_seconds`` is released, down to
``min_idle`` per shape (``min_idle_batched`` for a batch of more than one item: by default
none, so that the plans a burst's batches took, one per batch size, go back too). Its larger
buffers have device blocks of their own, freed with it, and the shared blocks left empty are
freed too (``on_release``): the allocator otherwise keeps every block until the device closes
and, where device memory is host memory (lavapipe), so would the process's RSS. The C heap's
free memory (the burst's request bodies and arrays) is handed back to the OS then as well.

Plans of at most ``max_shapes`` shapes are kept; a new shape drops the idle plans of the oldest.
When the model adopts a background pipeline (:meth:`PlanPool.renew`), each shape's plans are
recorded again on a worker thread (``PlanRenewals``) while the old ones, still correct, serve
on; an old plan is released once a newer one of its shape has landed and no waiter needs it.
Meanwhile a shape may hold up to twice ``max_per_shape`` plans (one new for each old one).
A plan whose run timed out may still be in use by the GPU: it is set aside (:meth:`abandon`),
never lent again, and released with the pool.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from .._errors import AsyncVkError
from .._threads import outlive, run_sync
from ..gpu._memory import dedicated_blocks
from ._heap_release import give_free_heap_back
from ._plan import Plan, PlanRequest
from ._plan_renewal import PlanRenewals
from ._plan_settings import check_settings
from ._pool_statistics import PoolStatistics


def _describe(key: PlanRequest) -> str:
    shapes = dict(key.inputs)
    return f"{shapes} x {key.batch} items" if key.batch > 1 else str(shapes)


class PlanQueueFull(AsyncVkError):
    """Every plan of a shape is lent and ``max_waiting`` extractions already wait for one."""


#: What a waiter is handed: a plan, or None: the right to build one (a place came free).
_Handed = Plan | None


@dataclass(eq=False)
class _Shape:
    """One key's plans: every one made (lent or idle), the idle ones with when they came
    back, builds under way and the extractions waiting, first come first."""

    plans: list[Plan] = field(default_factory=list)
    idle: list[tuple[Plan, float]] = field(default_factory=list)
    building: int = 0
    waiters: deque[asyncio.Future[_Handed]] = field(default_factory=deque)
    timer: asyncio.TimerHandle | None = None

    @property
    def held(self) -> int:
        return len(self.plans) + self.building


class PlanPool:
    """Plans by :data:`PlanRequest`; ``build`` makes one (on a worker thread: it records)."""

    def __init__(
        self,
        build: Callable[[PlanRequest], Plan],
        *,
        max_per_shape: int,
        min_idle: int = 1,
        min_idle_batched: int = 0,
        idle_seconds: float = 2.0,
        max_waiting: int | None = None,
        max_shapes: int = 8,
        version: Callable[[], int] = lambda: 0,
        on_release: Callable[[], object] = lambda: None,
    ) -> None:
        check_settings(max_per_shape, min_idle, idle_seconds, max_waiting)
        self._build = build
        self._version = version
        self._on_release = on_release
        self._max_per_shape = max_per_shape
        self._min_idle = min_idle
        self._min_idle_batched = min_idle_batched
        self._idle_seconds = idle_seconds
        self._max_waiting = max_waiting
        self._max_shapes = max_shapes
        self._shapes: dict[PlanRequest, _Shape] = {}
        self._abandoned: list[Plan] = []
        self._closed = False
        self._peak = 0
        self._built = 0
        self._released = 0
        self._renewals: PlanRenewals[PlanRequest, Plan] = PlanRenewals(
            build=self._build_dedicated,
            needed=self._renewal_needed,
            land=self._land,
            discard=Plan.release,
            version=version,
        )

    @property
    def plans(self) -> dict[PlanRequest, list[Plan]]:
        """Every plan made and not released, lent or idle, by key."""
        return {key: list(s.plans) for key, s in self._shapes.items() if s.plans}

    def statistics(self) -> PoolStatistics:
        shapes = self._shapes.values()
        idle = sum(len(s.idle) for s in shapes)
        plans = sum(len(s.plans) for s in shapes)
        return PoolStatistics(
            plans=plans + sum(s.building for s in shapes),
            lent=plans - idle,
            idle=idle,
            building=sum(s.building for s in shapes),
            waiting=sum(len(s.waiters) for s in shapes),
            peak_plans=self._peak,
            built=self._built,
            released=self._released,
            renewed=self._renewals.renewed,
        )

    async def acquire(self, key: PlanRequest) -> Plan:
        """An idle plan for ``key``, a new one, or, once ``max_per_shape`` are out, the
        first one given back after those already waiting have had theirs."""
        s = self._shapes.get(key)
        if s is None:
            self._evict_other_shapes(key)
            s = self._shapes[key] = _Shape()
        if not s.waiters:
            if s.idle:
                if s.idle[-1][0].pipelines_version != self._version():
                    self._newest_idle(key, s)
                return s.idle.pop()[0]
            if s.held < self._max_per_shape:
                self._reserve(s)
                return await self._make(key, s)
        if self._max_waiting is not None and len(s.waiters) >= self._max_waiting:
            raise PlanQueueFull(
                f"all {s.held} plans for inputs {_describe(key)} are in use and "
                f"{len(s.waiters)} extractions already wait for one"
            )
        waiter: asyncio.Future[_Handed] = asyncio.get_running_loop().create_future()
        s.waiters.append(waiter)
        try:
            handed = await waiter
        except asyncio.CancelledError:
            if waiter.cancelled():
                if waiter in s.waiters:  # else already passed over by _pass_on
                    s.waiters.remove(waiter)
            else:  # handed something just as it was cancelled: pass it on
                handed = waiter.result()
                if handed is None:
                    s.building -= 1  # the place reserved for it
                self._pass_on(key, s, handed)
            raise
        if handed is not None:
            return handed
        return await self._make(key, s)  # a place came free: build in it

    async def give_back(self, plan: Plan) -> None:
        """Return a plan from :meth:`acquire`; one the pool no longer holds is released."""
        key = plan.request
        s = self._shapes.get(key)
        if s is None or plan not in s.plans:  # evicted, or the pool was released
            plan.release()
            return
        if plan.pipelines_version != self._version():  # older than the model's pipelines
            newest = max(p.pipelines_version for p in s.plans)
            if plan.pipelines_version < newest:  # a newer plan of its shape has landed
                at_newest = sum(p.pipelines_version == newest for p in s.plans)
                if not s.waiters or at_newest >= self._max_per_shape:
                    self._release(s, plan)  # the newer ones serve the waiters
                    return
            else:
                self._renewals.start(key)
        self._pass_on(key, s, plan)

    def abandon(self, plan: Plan) -> None:
        """Take back a plan whose run did not end (its fence wait timed out): the GPU may
        still read and write its buffers, so it is neither lent again nor released until the
        pool is; its place is free for a new plan."""
        s = self._shapes.get(plan.request)
        if s is not None and plan in s.plans:
            s.plans.remove(plan)
            s.idle = [(p, t) for p, t in s.idle if p is not plan]
            self._pass_on(plan.request, s, None)
        self._abandoned.append(plan)

    def refuse_waiters(self, error: BaseException) -> None:
        """Fail every extraction waiting for a plan with ``error`` (its device was taken out:
        they are better sent elsewhere now than after a fence timeout of their own)."""
        for s in self._shapes.values():
            while s.waiters:
                waiter = s.waiters.popleft()
                if not waiter.done():
                    waiter.set_exception(error)

    def renew(self) -> None:
        """The model adopted pipelines: record each shape's plans again off the request path."""
        for key in list(self._shapes):
            self._renewals.start(key)

    async def renewed(self) -> None:
        """Return once no renewal runs."""
        await self._renewals.wait()

    def _renewal_needed(self, key: PlanRequest) -> bool:
        """Whether ``key`` holds plans older than the model's pipelines, more of them than
        plans at its pipelines (one renewed plan replaces one old one)."""
        s = self._shapes.get(key)
        if s is None or self._closed:
            return False
        version = self._version()
        old = sum(p.pipelines_version < version for p in s.plans)
        return len(s.plans) - old < min(old, self._max_per_shape)

    def _land(self, key: PlanRequest, plan: Plan) -> bool:
        """A renewed plan joins its shape (False: the shape or the pool is gone)."""
        s = self._shapes.get(key)
        if s is None or self._closed:
            return False
        s.plans.append(plan)
        self._built += 1
        self._peak = max(self._peak, s.held)
        self._drop_older_idle(s, plan.pipelines_version)
        self._pass_on(key, s, plan)
        return True

    def _newest_idle(self, key: PlanRequest, s: _Shape) -> None:
        """Put the idle plan of the newest pipelines last, release older idle ones, and
        start a renewal if even that one is older than the model's pipelines."""
        s.idle.sort(key=lambda idle: idle[0].pipelines_version)
        newest = s.idle[-1][0]
        self._drop_older_idle(s, newest.pipelines_version)
        if newest.pipelines_version != self._version():
            self._renewals.start(key)

    async def _make(self, key: PlanRequest, s: _Shape) -> Plan:
        """Build a plan in the place already counted in ``s.building``. A cancelled caller
        still waits for the build (a thread cannot be stopped), then gives the plan to the
        pool, so that no plan is lost and no place is left taken."""
        task = asyncio.ensure_future(run_sync(self._build_dedicated, key))
        try:
            await outlive(task)
        except asyncio.CancelledError:
            self._settle(key, s, task, lend=False)
            raise
        plan = self._settle(key, s, task, lend=True)
        assert plan is not None
        return plan

    def _build_dedicated(self, key: PlanRequest) -> Plan:
        """A plan whose larger buffers have device blocks of their own: released, they go back
        to the driver instead of leaving holes in blocks that the weights keep."""
        with dedicated_blocks():
            return self._build(key)

    def _settle(
        self, key: PlanRequest, s: _Shape, task: asyncio.Future[Plan], *, lend: bool
    ) -> Plan | None:
        """A build has ended: its plan joins the pool, lent (``lend``) or passed on; a failed
        build passes its place on, and its error is raised to the one who waited for it."""
        s.building -= 1
        error = task.exception() if not task.cancelled() else asyncio.CancelledError()
        if error is None and self._closed:  # the model was released while it was built
            task.result().release()
            error = RuntimeError("the model was released while a plan was built for it")
        if error is not None:
            self._pass_on(key, s, None)
            if lend:
                raise error
            return None
        plan = task.result()
        s.plans.append(plan)
        self._built += 1
        if lend:
            return plan
        self._pass_on(key, s, plan)
        return None

    def _reserve(self, s: _Shape) -> None:
        """Count a build about to start (the cap counts plans not recorded yet)."""
        s.building += 1
        self._peak = max(self._peak, s.held)

    def _pass_on(self, key: PlanRequest, s: _Shape, handed: _Handed) -> None:
        """A plan came back (or, with None, a place came free): to the first waiter, else
        the plan goes idle (and the shape's idle timer starts)."""
        while s.waiters:
            waiter = s.waiters.popleft()
            if waiter.done():
                continue
            if handed is None:
                self._reserve(s)  # the waiter builds in the place
            waiter.set_result(handed)
            return
        if handed is None:
            return
        loop = asyncio.get_running_loop()
        s.idle.append((handed, loop.time()))
        if self._idle_seconds == 0:
            self.trim_idle(loop.time())
        elif s.timer is None and len(s.plans) > self._keep(key):
            self._start_timer(key, s, loop.time() + self._idle_seconds)

    def _start_timer(self, key: PlanRequest, s: _Shape, due: float) -> None:
        s.timer = asyncio.get_running_loop().call_at(due, self._on_timer, key, due)

    def _on_timer(self, key: PlanRequest, due: float) -> None:
        s = self._shapes.get(key)
        if s is not None:
            s.timer = None
        # the loop may run a timer up to its clock's resolution early: count from ``due``
        self.trim_idle(max(asyncio.get_running_loop().time(), due))

    def trim_idle(self, now: float) -> int:
        """Release the plans idle for ``idle_seconds`` at ``now`` (the loop's clock), those
        idle longest first, keeping ``min_idle`` plans per shape; then free the device blocks
        left empty. Returns the plans released."""
        released = 0
        for key, s in list(self._shapes.items()):
            spare = len(s.plans) - self._keep(key)
            oldest = min(p.pipelines_version for p in s.plans) if s.plans else 0
            expired = [  # longest first; a renewed plan stays while an old one is lent
                p
                for p, t in s.idle
                if now - t >= self._idle_seconds and p.pipelines_version <= oldest
            ]
            for plan in expired[: max(spare, 0)]:
                self._release(s, plan)
                released += 1
            if not s.plans and not s.building and not s.waiters:
                del self._shapes[key]
            elif s.timer is None and len(s.plans) > self._keep(key) and s.idle:
                self._start_timer(key, s, min(t for _, t in s.idle) + self._idle_seconds)
        if released:
            self._on_release()
            give_free_heap_back()
        return released

    def _keep(self, key: PlanRequest) -> int:
        """Plans of ``key`` kept once idle."""
        return self._min_idle if key.batch == 1 else self._min_idle_batched

    def _release(self, s: _Shape, plan: Plan) -> None:
        s.plans.remove(plan)
        s.idle = [(p, t) for p, t in s.idle if p is not plan]
        plan.release()
        self._released += 1

    def _drop_older_idle(self, s: _Shape, version: int) -> None:
        """Release idle plans recorded with older pipelines than ``version``."""
        for plan, _ in list(s.idle):
            if plan.pipelines_version < version:
                self._release(s, plan)

    def _evict_other_shapes(self, keep: PlanRequest) -> None:
        """Keep plans for at most ``max_shapes`` shapes: drop the oldest shape that is idle."""
        while len(self._shapes) >= self._max_shapes:
            for key, s in self._shapes.items():
                if key != keep and not s.building and not s.waiters and len(s.idle) == len(s.plans):
                    for plan in list(s.plans):
                        self._release(s, plan)
                    self._on_release()
                    if s.timer is not None:
                        s.timer.cancel()
                    del self._shapes[key]
                    break
            else:
                return

    def release(self) -> None:
        """Release every plan, lent ones included (their extractions must be over)."""
        self._closed = True
        for plan in self._abandoned:
            plan.release()
        self._abandoned.clear()
        for s in self._shapes.values():
            if s.timer is not None:
                s.timer.cancel()
            for plan in s.plans:
                plan.release()
            for waiter in s.waiters:
                if not waiter.done():
                    waiter.set_exception(RuntimeError("the model was released"))
        self._shapes.clear()
