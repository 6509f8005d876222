"""What a cache file must match to be trusted on this device, and the one test of "same device"."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The fields that make two identities one device and driver, in the order a mismatch names
#: them: all of them. Names are kept as ``name_hash``es, as cache files and indexes store them.
MATCH_FIELDS = (
    "vendor_id",
    "device_id",
    "api_version",
    "driver_version",
    "driver_id",
    "device_name_hash",
    "driver_name_hash",
    "pipeline_cache_uuid",
)


def name_hash(text: str) -> int:
    """blake2b-64 of a name: stored names are hashes, as identity, not for display."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little")


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

    def match_key(self) -> dict[str, Any]:
        """The ``MATCH_FIELDS`` of this identity, JSON-ready (the UUID as hex)."""
        return {
            "vendor_id": self.vendor_id,
            "device_id": self.device_id,
            "api_version": self.api_version,
            "driver_version": self.driver_version,
            "driver_id": self.driver_id,
            "device_name_hash": name_hash(self.device_name),
            "driver_name_hash": name_hash(self.driver_name),
            "pipeline_cache_uuid": self.pipeline_cache_uuid.hex(),
        }

    def mismatch(self, stored: Mapping[str, Any]) -> tuple[str, str, str] | None:
        """The first of ``MATCH_FIELDS`` where ``stored`` (a match key as a file or an index
        holds it) is not this device: (field, stored value, this device's), both readable."""
        mine = self.match_key()
        for field in MATCH_FIELDS:
            got, want = stored.get(field), mine[field]
            if isinstance(got, bytes):
                got = got.hex()
            if got == want:
                continue
            if field.endswith("_hash"):
                name = self.device_name if field.startswith("device") else self.driver_name
                return field, _hex(got, "016x"), f"{want:016x} (of {name!r})"
            if field in ("vendor_id", "device_id"):
                return field, _hex(got, "#x"), f"0x{want:x}"
            return field, str(got), str(want)
        return None

    def same_device(self, stored: Mapping[str, Any]) -> bool:
        """Whether ``stored`` (a match key) names this device and driver: every field equal."""
        return self.mismatch(stored) is None


def _hex(value: Any, spec: str) -> str:
    return format(value, spec) if isinstance(value, int) else repr(value)
