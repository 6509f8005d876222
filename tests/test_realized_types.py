"""The binding's types are realized on one thread before worker threads use them (cffi 2.x can
abort a process when two threads realize one type at once: python-cffi/cffi#271)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from asyncvk.gpu._realized_types import FUNCTIONS, TYPES, VALUE_TYPES

PACKAGE = Path(__file__).resolve().parent.parent / "asyncvk"
_NEW = re.compile(r'ffi\.new\(\s*"(Vk\w+)')
_CONSTRUCTOR = re.compile(r"\bvk\.(Vk\w+)\(")
_CALL = re.compile(r"\b(?:checked|api)\.(vk[A-Z]\w+)")
_VALUE = re.compile(r'ffi\.(?:new|cast)\(\s*"((?!Vk)[\w ]+\**)(\[\d*\])?"')


def _used(pattern: re.Pattern[str]) -> set[str]:
    return {m for path in PACKAGE.rglob("*.py") for m in pattern.findall(path.read_text())}


def test_every_type_and_function_the_package_uses_is_listed() -> None:
    """A type or function added to the code but not to the lists would be realized lazily
    again, on whichever thread meets it first."""
    assert _used(_NEW) | _used(_CONSTRUCTOR) <= set(TYPES)
    assert _used(_CALL) <= set(FUNCTIONS)
    values = {
        base + ("[]" if array else "")
        for path in PACKAGE.rglob("*.py")
        for base, array in _VALUE.findall(path.read_text())
    }
    assert values and values <= set(VALUE_TYPES)


def test_the_instance_realizes_them_before_any_device_exists() -> None:
    """Realized by whoever creates the instance, so before any device, pipeline or worker thread
    can use the binding (a fresh process: nothing realized them before)."""
    script = (
        "from asyncvk.gpu import _realized_types\n"
        "before = _realized_types._done\n"
        "from asyncvk.gpu._instance import get_gpu_count\n"
        "get_gpu_count()\n"
        "print(before, _realized_types._done)"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-500:]
    assert out.stdout.split() == ["False", "True"]
