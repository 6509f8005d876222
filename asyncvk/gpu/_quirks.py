"""Driver quirks as data: one table, each rule with its reason, plus an environment override.

A quirk changes how asyncvk drives a device. Rules match on vendor id, optional device ids,
optional driver ids and an optional API-version ceiling; the first matching rule for a flag wins.
``ASYNCVK_QUIRKS=flag,!flag`` forces flags on (``flag``) or off (``!flag``), so that both paths of
every quirk can be tested on lavapipe.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ._identity import DeviceIdentity

#: The flags asyncvk knows, with what each one changes.
QUIRK_FLAGS: dict[str, str] = {
    "broken_pipeline_cache": (
        "no VkPipelineCache and no in-memory pipeline reuse: the driver cannot share created "
        "pipelines"
    ),
    "serialize_pipeline_creation": (
        "vkCreateComputePipelines runs under one lock per device: the driver is not thread-safe "
        "there"
    ),
    "upload_through_staging": (
        "compute buffers are never mapped, even where device-local memory is host-visible: "
        "uploads and readbacks go through staging buffers and copy commands (for drivers whose "
        "mapped device memory is slow or broken, and to test that path on any driver)"
    ),
}


def _vk_version(major: int, minor: int, patch: int) -> int:
    return (major << 22) | (minor << 12) | patch


@dataclass(frozen=True)
class QuirkRule:
    """One row of the quirk table."""

    flag: str
    reason: str
    vendor_id: int
    device_ids: frozenset[int] | None = None
    driver_ids: frozenset[int] | None = None
    api_version_below: int | None = None

    def matches(self, identity: DeviceIdentity) -> bool:
        if identity.vendor_id != self.vendor_id:
            return False
        if self.device_ids is not None and identity.device_id not in self.device_ids:
            return False
        if self.driver_ids is not None and identity.driver_id not in self.driver_ids:
            return False
        return self.api_version_below is None or identity.api_version < self.api_version_below


QUIRK_TABLE: tuple[QuirkRule, ...] = (
    QuirkRule(
        flag="broken_pipeline_cache",
        reason="Qualcomm Adreno drivers before Vulkan 1.0.66 cannot share created pipelines "
        "(ncnn bug_corrupted_online_pipeline_cache, bf279dcf)",
        vendor_id=0x5143,
        api_version_below=_vk_version(1, 0, 66),
    ),
    QuirkRule(
        flag="serialize_pipeline_creation",
        reason="Qualcomm Adreno drivers before Vulkan 1.0.66 also crash when pipelines are "
        "created from several threads at once; serialise the call to be safe",
        vendor_id=0x5143,
        api_version_below=_vk_version(1, 0, 66),
    ),
)


@dataclass(frozen=True)
class Quirks:
    """The quirk flags in force for one device, and why each is set."""

    broken_pipeline_cache: bool = False
    serialize_pipeline_creation: bool = False
    upload_through_staging: bool = False
    reasons: dict[str, str] = field(default_factory=dict, compare=False)

    def as_dict(self) -> dict[str, object]:
        return {
            "broken_pipeline_cache": self.broken_pipeline_cache,
            "serialize_pipeline_creation": self.serialize_pipeline_creation,
            "upload_through_staging": self.upload_through_staging,
            "reasons": dict(self.reasons),
        }


def parse_override(text: str) -> dict[str, bool]:
    """Parse ``ASYNCVK_QUIRKS`` (``flag,!flag``); unknown names raise ValueError."""
    forced: dict[str, bool] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        on = not item.startswith("!")
        name = item.lstrip("!")
        if name not in QUIRK_FLAGS:
            known = ", ".join(sorted(QUIRK_FLAGS))
            raise ValueError(f"ASYNCVK_QUIRKS: unknown quirk {name!r} (known: {known})")
        forced[name] = on
    return forced


def resolve_quirks(identity: DeviceIdentity, override: str | None = None) -> Quirks:
    """The flags for ``identity``: table rules, then the override (argument or environment)."""
    values: dict[str, bool] = dict.fromkeys(QUIRK_FLAGS, False)
    reasons: dict[str, str] = {}
    for rule in QUIRK_TABLE:
        if not values[rule.flag] and rule.matches(identity):
            values[rule.flag] = True
            reasons[rule.flag] = rule.reason
    text = os.environ.get("ASYNCVK_QUIRKS", "") if override is None else override
    for name, on in parse_override(text).items():
        values[name] = on
        reasons[name] = f"forced {'on' if on else 'off'} by ASYNCVK_QUIRKS"
    return Quirks(reasons=reasons, **values)
