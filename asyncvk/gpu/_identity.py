"""What a cache file must match to be trusted on this device."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DeviceIdentity:
    """The identity of a GPU and its driver, as a persistent cache records it.

    A driver update changes ``driver_version`` (and usually ``pipeline_cache_uuid``), which is
    what turns an old cache file into a miss.
    """

    vendor_id: int
    device_id: int
    api_version: int
    driver_version: int
    driver_id: int
    device_name: str
    driver_name: str
    pipeline_cache_uuid: bytes  # 16 bytes

    def __post_init__(self) -> None:
        if len(self.pipeline_cache_uuid) != 16:
            raise ValueError("pipeline_cache_uuid must be 16 bytes")
