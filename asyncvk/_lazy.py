"""PEP 562 lazy attributes for a package: a public name imports its module on first read.

``import asyncvk`` and ``import asyncvk.gpu`` stay cheap this way (no numpy, no Vulkan until a
name that needs them is used), which is what lets the command line open the device on a thread
while the rest is imported.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_attributes(
    package: str, names: dict[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``package``: ``names`` maps each public name to the
    (relative) module that defines it; a name read once becomes a plain global in
    ``namespace``."""

    def getattr_(name: str) -> Any:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value  # the next read is a plain global
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(names))

    return getattr_, dir_
