"""A plan's blob memory: when each storage is live, and its offset in one arena.

Liveness is counted in layer positions: barriers separate every layer, so a blob's bytes can be
reused by any layer after its last reader, even inside one command buffer. Offsets are given
greedily, first fit in order of definition, so the arena is the peak of live bytes (rounded to
the device's alignment) rather than the sum of all blobs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from ._graph import GraphNode

#: A run of GPU layers as liveness sees it: first and last position, the storages the host
#: writes before it, and those it reads after it.
SegmentSpan = tuple[int, int, Iterable[int], Iterable[int]]


@dataclass
class Storage:
    """Bytes in the arena shared by a blob and its aliases."""

    nbytes: int
    first: int  # step index of the definition
    last: int  # step index of the last use
    offset: int = -1


def live_ranges(
    run: Sequence[GraphNode],
    root: Mapping[int, int],
    sizes: Mapping[int, int],
    segments: Iterable[SegmentSpan],
    targets: Iterable[int],
) -> dict[int, Storage]:
    """The storage (by root blob, with its ``sizes``) of each device blob and when it is live.

    ``root`` maps an aliasing blob to the blob whose bytes it shares; the storages of
    ``targets`` (root blobs) stay live to the end (the host reads them last)."""
    storages = {b: Storage(n, first=len(run), last=-1) for b, n in sizes.items()}
    for p, node in enumerate(run):
        for b in node.bottoms + node.tops:
            st = storages.get(root.get(b, b))
            if st is not None:
                st.first = min(st.first, p)
                st.last = max(st.last, p)
    for start, end, uploads, downloads in segments:
        for b in uploads:  # written by the host before the segment starts
            storages[b].first = min(storages[b].first, start)
        for b in downloads:  # read back after the segment ends
            storages[b].last = max(storages[b].last, end)
    for target in targets:
        target_storage = storages.get(target)
        if target_storage is not None:
            target_storage.last = len(run)
    return storages


def assign_offsets(storages: list[Storage], alignment: int) -> int:
    """Greedy first-fit by definition order; returns the arena size (peak bytes)."""
    live: list[Storage] = []
    peak = 0
    for s in sorted(storages, key=lambda s: (s.first, -s.nbytes)):
        live = [x for x in live if x.last >= s.first]
        size = -(-s.nbytes // alignment) * alignment
        offset = 0
        for x in sorted(live, key=lambda x: x.offset):
            end = x.offset + -(-x.nbytes // alignment) * alignment
            if offset + size <= x.offset:
                break
            offset = max(offset, end)
        s.offset = offset
        live.append(s)
        peak = max(peak, offset + size)
    return peak
