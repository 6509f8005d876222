"""The block allocator: released neighbours merge back into one free range, so a block that was
split can hold a buffer of its whole size again (observed through ``allocator.stats()``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from asyncvk.gpu import VulkanDevice


@pytest.fixture
def fresh() -> Iterator[VulkanDevice]:
    """A device of its own: an allocator with no blocks yet."""
    device = VulkanDevice(0)
    yield device
    device.close()


def _blocks(device: VulkanDevice) -> int:
    return device.allocator.stats()["blocks"]


@pytest.mark.parametrize("order", ["left_first", "right_first", "middle_last"])
def test_released_neighbours_merge_into_a_whole_block(fresh: VulkanDevice, order: str) -> None:
    block = fresh.allocator.block_size
    quarter = block // 4  # three buffers and a tail: four neighbouring ranges of one block
    buffers = [fresh.allocate(quarter) for _ in range(3)]
    assert _blocks(fresh) == 1
    release = {"left_first": [0, 1, 2], "right_first": [2, 1, 0], "middle_last": [0, 2, 1]}
    for i in release[order]:
        buffers[i].release()
    assert fresh.allocator.stats()["used_bytes"] == 0
    whole = fresh.allocate(block)  # fits only if every range merged back into one
    assert _blocks(fresh) == 1, "the freed ranges stayed apart"
    whole.release()


def test_a_live_buffer_between_two_free_ranges_keeps_them_apart(fresh: VulkanDevice) -> None:
    block = fresh.allocator.block_size
    left, middle, right = (fresh.allocate(block // 4) for _ in range(3))
    left.release()
    right.release()
    # free now: a quarter on the left, a half (right and the tail) on the right
    big = fresh.allocate(block // 2 + fresh.allocator.alignment)  # fits in neither: a new block
    assert _blocks(fresh) == 2
    for buf in (middle, big):
        buf.release()
    assert fresh.allocator.stats()["used_bytes"] == 0


def test_transfer_buffers_take_small_blocks(fresh: VulkanDevice) -> None:
    """Staging and readback memory is host memory the driver pins: a 4 KB readback takes a
    1 MB block, not a 64 MB compute block, and a larger one a block of the next power of two."""
    from asyncvk.gpu._memory import TRANSFER_BLOCK_SIZE, MemoryKind

    small = fresh.allocate(4096, MemoryKind.READBACK)
    assert fresh.allocator.stats()["reserved_bytes"] == TRANSFER_BLOCK_SIZE
    large = fresh.allocate(3 * TRANSFER_BLOCK_SIZE, MemoryKind.STAGING)
    assert fresh.allocator.stats()["reserved_bytes"] == 5 * TRANSFER_BLOCK_SIZE
    compute = fresh.allocate(4096)
    assert (
        fresh.allocator.stats()["reserved_bytes"]
        == 5 * TRANSFER_BLOCK_SIZE + fresh.allocator.block_size
    )
    for buf in (small, large, compute):
        buf.release()
