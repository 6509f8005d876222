"""NetGroup: one model on several GPUs behind one ``run``.

Each call goes to the member that should answer it first: the fewest runs in flight, then the
shortest measured mean run time. A member whose device fails (a DeviceError: lost, a Vulkan
error, a fence wait over its limit) is taken out and the call is sent to another, so no call is
lost to one bad GPU; an input the model cannot take fails at once, wherever it ran.
"""

from __future__ import annotations

import asyncio
import operator
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import IO, Any, Literal, TypeVar

import numpy as np
from numpy.typing import ArrayLike

from .._errors import DeviceError, ModelFormatError, NoDeviceError, OutOfDeviceMemoryError
from ..gpu._instance import get_gpu_count
from ._group_member import GroupMember, MemberStatistics
from ._model_source import model_source
from ._net import Net
from ._option import Option

T = TypeVar("T")


class NetGroup:
    """The same model on several Vulkan devices, each call sent to the one that will finish it
    first.

    Each device given is a member with a logical device, a PipelineCache and a :class:`Net`
    of its own (an index given twice is two members on one GPU). The Option applies to each
    member's Net: with ``cache_dir`` each saves its cache folder's file for its device, and
    with ``remote_cache`` all of them share that Redis tier.

    A call goes to the member with the fewest runs in flight; among those, to the one with the
    shortest mean run time (a moving mean of its answered runs). A member whose device fails
    (any :class:`DeviceError` but :class:`OutOfDeviceMemoryError`, which a large input causes
    on any device) is taken out, logged, and its Net released in the background; the call is
    sent to another member. When none is left, the call raises DeviceError naming every member
    and why it was taken out. An :class:`InputError` is raised at once and the member stays.

    Arguments:
        devices: Vulkan device indices (``get_gpu_info`` numbers them), or ``"all"``: every
            device ``get_gpu_count()`` reports.
        opt: the settings of each member's Net (default ``Option()``). ``pipeline_cache`` and
            ``vulkan_device`` must be left unset: the group gives each member its own.
        clock: the time source for measuring runs (default ``time.perf_counter``).

    Raises:
        NoDeviceError: no Vulkan device, or an index past the last one.
        TypeError: ``devices`` or ``opt`` of the wrong type.
        ValueError: no device given, or an ``opt`` the group cannot use.

    Example::

        async with asyncvk.NetGroup("all") as group:
            await group.load_param("model.param")
            await group.load_model("model.bin")
            outputs = await group.run({"in0": image})
    """

    def __init__(
        self,
        devices: Sequence[int] | Literal["all"] = "all",
        opt: Option | None = None,
        *,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        #: The settings of each member's Net (each gets its own device and cache besides).
        self.opt = _group_option(opt)
        self._members = tuple(
            GroupMember(position, index) for position, index in enumerate(_indices(devices))
        )
        self._clock = clock
        self._opened = False
        self._closed = False

    # -- loading ---------------------------------------------------------------------------------

    async def load_param(self, source: str | os.PathLike[str] | bytes | IO[Any]) -> None:
        """Open every member's device (the first time), then parse the ``.param`` on each.

        Arguments:
            source: a path (``~`` expanded), the file's bytes, or a file object (read once).

        Raises:
            FileNotFoundError: the path names no file.
            ModelFormatError: the file is malformed.
            DeviceError: no member's device could be opened (each named, with why).
        """
        self._check_open()
        param = await model_source(source, ".param")
        if not self._opened:
            self._opened = True
            await self._on_each(lambda member: member.open(self.opt), self._members)
        await self._on_each(lambda member: _net(member).load_param(param))

    async def load_model(self, source: str | os.PathLike[str] | bytes | IO[Any]) -> None:
        """Read the weights and build the pipelines on every member, concurrently.

        Arguments:
            source: a path (``~`` expanded), the file's bytes, or a file object (read once).

        Raises:
            FileNotFoundError: the path names no file.
            ModelFormatError: ``load_param`` was not called, or the weights do not fit it.
            DeviceError: every member's device failed (each named, with why); a member whose
                device fails while the others load is taken out.
        """
        self._check_open()
        if not self._opened:
            raise ModelFormatError("load_param must be called before load_model")
        weights = await model_source(source, ".bin")
        await self._on_each(lambda member: _net(member).load_model(weights))

    async def _on_each(
        self,
        action: Callable[[GroupMember], Awaitable[None]],
        members: Iterable[GroupMember] | None = None,
    ) -> None:
        """``action`` on each member (the serving ones by default) at once. A member whose
        device failed is taken out; any other error is raised once all have ended."""
        chosen = [m for m in self._members if m.serving] if members is None else list(members)
        results = await asyncio.gather(*(action(m) for m in chosen), return_exceptions=True)
        errors, failed = [], None
        for member, result in zip(chosen, results, strict=True):
            if isinstance(result, DeviceError):
                member.take_out(result)
                failed = result
            elif isinstance(result, BaseException):
                errors.append(result)
        if errors:
            raise errors[0]
        if not any(m.serving for m in self._members):
            raise self._none_left() from failed

    # -- running -------------------------------------------------------------------------------

    async def run(
        self, inputs: Mapping[str, ArrayLike], outputs: Iterable[str] | None = None
    ) -> dict[str, np.ndarray]:
        """Run the model once on ``inputs`` on the member that should finish first (see
        :meth:`Net.run`: the same arguments and result).

        Arguments:
            inputs: blob name -> array, one per input of the model.
            outputs: the blobs to return; None returns every output of the model.

        Returns:
            Blob name -> float32 array, in the order asked for.

        Raises:
            InputError: an input the model cannot take (no member is taken out for it).
            DeviceError: every member's device failed (each named, with why).
            RuntimeError: ``load_model`` has not finished, or the group is closed.

        Example::

            outputs = await group.run({"in0": image})
        """
        names = None if outputs is None else list(outputs)  # an iterator is read once
        return await self.call(lambda net: net.run(inputs, names))

    async def call(self, work: Callable[[Net], Awaitable[T]]) -> T:
        """``await work(net)`` with the Net of the member that should finish first, sent to
        another member when its device fails, as :meth:`run` is: for work that ``run`` does
        not cover (a server's batch through an :class:`Extractor`).

        Example::

            async def top(net: asyncvk.Net) -> np.ndarray:
                return (await net.run({"in0": image}))["out0"].argmax()

            best = await group.call(top)
        """
        while True:
            member = self._choose()
            member.run_begins()
            start = self._clock()
            try:
                result = await work(_net(member))
            except DeviceError as exc:
                member.run_ends(None)
                if isinstance(exc, OutOfDeviceMemoryError):
                    raise  # the input's size, most likely: another device would fail too
                member.take_out(exc)
                if not any(m.serving for m in self._members):
                    raise self._none_left() from exc
                continue
            except BaseException:
                member.run_ends(None)
                raise
            member.run_ends(self._clock() - start)
            return result

    def _choose(self) -> GroupMember:
        self._check_open()
        serving = [m for m in self._members if m.serving]
        if not serving:
            if all(m.failure is None for m in self._members):
                raise RuntimeError("load_model must finish before run")
            raise self._none_left()
        return min(serving, key=GroupMember.choice_key)

    def _none_left(self) -> DeviceError:
        why = "; ".join(
            f"{m.label}: {type(m.failure).__name__}: {m.failure}" for m in self._members
        )
        return DeviceError(f"no device of the NetGroup is left: {why}")

    # -- reading -------------------------------------------------------------------------------

    def statistics(self) -> tuple[MemberStatistics, ...]:
        """Each member's load now, in the order of ``devices``."""
        return tuple(m.statistics() for m in self._members)

    @property
    def nets(self) -> tuple[Net, ...]:
        """Each member's Net, in the order of ``devices`` (empty before ``load_param``); a
        member taken out keeps its Net here, released."""
        return tuple(m.net for m in self._members if m.net is not None)

    @property
    def serving_nets(self) -> tuple[Net, ...]:
        """The Nets of the members calls may be sent to (loaded, not taken out)."""
        return tuple(m.net for m in self._members if m.serving and m.net is not None)

    @property
    def serving_members(self) -> int:
        """Members that calls may be sent to: loaded and not taken out."""
        return sum(m.serving for m in self._members)

    @property
    def devices(self) -> tuple[int, ...]:
        """The Vulkan device index of each member."""
        return tuple(m.device_index for m in self._members)

    @property
    def input_names(self) -> list[str]:
        """The model's inputs (as :attr:`Net.input_names`; empty before ``load_param``)."""
        nets = self.nets
        return nets[0].input_names if nets else []

    @property
    def output_names(self) -> list[str]:
        """The model's outputs (as :attr:`Net.output_names`; empty before ``load_param``)."""
        nets = self.nets
        return nets[0].output_names if nets else []

    @property
    def closed(self) -> bool:
        """Whether ``aclose`` has run."""
        return self._closed

    # -- lifetime ------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the NetGroup is closed")

    async def aclose(self) -> None:
        """Wait for the runs in flight, then release every member: a serving one as
        :meth:`Net.aclose` (its cache folder flushed), then its cache and device. Idempotent."""
        self._closed = True
        await asyncio.gather(*(m.close() for m in self._members))

    async def __aenter__(self) -> NetGroup:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        stats = self.statistics()
        out = sum(s.taken_out for s in stats)
        state = "closed" if self._closed else f"{sum(s.in_flight for s in stats)} runs in flight"
        return (
            f"<NetGroup [devices {', '.join(map(str, self.devices))}: {len(stats) - out} "
            f"serving, {out} taken out | {state}]>"
        )


def _net(member: GroupMember) -> Net:
    assert member.net is not None  # only opened members are acted on
    return member.net


def _group_option(opt: Option | None) -> Option:
    if opt is None:
        return Option()
    if not isinstance(opt, Option):
        raise TypeError(f"NetGroup opt must be an Option, got {type(opt).__name__}")
    if opt.pipeline_cache is not None:
        raise ValueError(
            "NetGroup opt.pipeline_cache must be None: a cache belongs to one device, and the "
            "group makes one per member"
        )
    if opt.vulkan_device is not None:
        raise ValueError("NetGroup opt.vulkan_device must be None: pass the devices instead")
    if opt.use_vulkan_compute is False:
        raise ValueError("NetGroup opt.use_vulkan_compute=False: a group runs on Vulkan devices")
    return opt


def _indices(devices: Sequence[int] | Literal["all"]) -> list[int]:
    """The device indices asked for, each checked against the devices there are."""
    if isinstance(devices, str):
        if devices != "all":
            raise ValueError(f'NetGroup devices must be "all" or indices, got {devices!r}')
        count = get_gpu_count()
        if count == 0:
            raise NoDeviceError('NetGroup("all"): no Vulkan device (install a Vulkan driver)')
        return list(range(count))
    if not isinstance(devices, Sequence):
        raise TypeError(f"NetGroup devices must be a sequence of ints, got {devices!r}")
    if not devices:
        raise ValueError("NetGroup devices is empty: give at least one device index")
    count = get_gpu_count()
    indices = []
    for position, value in enumerate(devices):
        if isinstance(value, bool) or not hasattr(value, "__index__"):
            raise TypeError(f"NetGroup devices[{position}] must be an int, got {value!r}")
        index = operator.index(value)
        if not 0 <= index < count:
            there = f"0 to {count - 1}" if count else "there is none"
            raise NoDeviceError(
                f"NetGroup devices[{position}] is {index}, past the Vulkan devices ({there})"
            )
        indices.append(index)
    return indices
