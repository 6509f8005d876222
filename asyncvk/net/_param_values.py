"""ncnn's typed parameter values: the ``id=value`` pairs after a layer's blob names.

A value with '.', 'e' or 'E' is a float, else an int (decided on the token text, as ncnn does);
one starting with a letter or '"' is a string (quotes removed, at most 255 characters);
``id=a,b,c`` is an array (typed float if any element is a float) and ``-233XX=n,a,b`` is the
old array syntax for id XX, whose first element counts the rest. Ids run 0..31: 30 holds the
top-shape hints (an int array) and 31 the featmask (an int).

Every malformed value fails through ``Where``, naming its file, line and layer.
"""

from __future__ import annotations

import re
from typing import NoReturn

from .._errors import ModelFormatError
from ..layers._paramdict import ParamDict, ParamValue

#: ncnn's NCNN_MAX_PARAM_COUNT is 32, so ids run 0..31.
MAX_PARAM_ID = 31
#: ncnn scans names with ``%255s`` and limits strings to 255 characters.
MAX_STRING = 255
OLD_ARRAY_BASE = -23300
SHAPE_HINTS_ID = 30
FEATMASK_ID = 31

# C's isspace() in the "C" locale: what scanf skips. str.split() would also split on Unicode
# spaces, which ncnn keeps inside names.
WS = " \t\r\f\v"
TOKEN = re.compile(f"[^{WS}]+")
_INT = re.compile(r"[+-]?[0-9]+\Z")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z")
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


class Where:
    """File, line and (once known) layer name of the text being parsed, for errors."""

    def __init__(self, file: str, line: int) -> None:
        self.file = file
        self.line = line
        self.layer: str | None = None

    def fail(self, message: str) -> NoReturn:
        raise ModelFormatError(message, file=self.file, line=self.line, layer=self.layer)


def parse_params(line: str, pos: int, where: Where) -> ParamDict:
    """Scan ``id=value`` pairs; quoted strings may hold spaces, as in ncnn."""
    values: dict[int, ParamValue] = {}
    length = len(line)
    while True:
        while pos < length and line[pos] in WS:
            pos += 1
        if pos >= length:
            return ParamDict(values)
        token = TOKEN.match(line, pos)
        assert token is not None  # pos is at a non-space character
        key_text, eq, value_text = token.group().partition("=")
        if not eq:
            where.fail(f"expected id=value, got {token.group()[:40]!r}")
        pos = token.end()
        key, old_array = _key(key_text, where)
        if key in values:
            where.fail(f"param {key} given twice")
        value: ParamValue
        if old_array:
            value = _old_array(value_text, key, where)
        elif value_text.startswith('"'):
            value_start = token.start() + len(key_text) + 2
            close = line.find('"', value_start)
            if close < 0:
                where.fail(f"param {key}: unterminated quoted string")
            pos = close + 1
            if pos < length and line[pos] not in WS:
                where.fail(f"param {key}: text after the closing quote")
            value = _string(line[value_start:close], key, where)
        else:
            value = _value(value_text, key, where)
        values[key] = _check_reserved(key, value, where)


def _key(text: str, where: Where) -> tuple[int, bool]:
    """Return (param id, is old array syntax)."""
    key = parse_int(text)
    if key is None:
        where.fail(f"malformed param key {text[:40]!r} (expected an integer id before '=')")
    old_array = key <= OLD_ARRAY_BASE
    param_id = OLD_ARRAY_BASE - key if old_array else key
    if not 0 <= param_id <= MAX_PARAM_ID:
        written = f" (written {key})" if old_array else ""
        where.fail(f"param id {param_id}{written} out of range 0..{MAX_PARAM_ID}")
    return param_id, old_array


def _value(text: str, key: int, where: Where) -> ParamValue:
    if not text:
        where.fail(f"param {key} has no value")
    if text[0].isascii() and text[0].isalpha():  # C isalpha(): ASCII letters only
        return _string(text.removesuffix('"'), key, where)
    items = text.split(",")
    if len(items) == 1:
        return _number(text, key, where)
    if items[-1] == "":  # ncnn stops at a trailing comma
        items.pop()
    return _typed_array([_number(t, key, where) for t in items])


def _old_array(text: str, key: int, where: Where) -> tuple[int, ...] | tuple[float, ...]:
    items = text.split(",")
    declared = parse_int(items[0])
    if declared is None or declared < 0:
        where.fail(f"param {key}: old-style array must start with its length, got {items[0]!r}")
    values = [_number(t, key, where) for t in items[1:]]
    if declared != len(values):
        where.fail(f"param {key}: old-style array declares {declared} values but has {len(values)}")
    return _typed_array(values)


def _typed_array(values: list[int | float]) -> tuple[int, ...] | tuple[float, ...]:
    if any(isinstance(v, float) for v in values):
        return tuple(float(v) for v in values)
    return tuple(int(v) for v in values)


def _string(text: str, key: int, where: Where) -> str:
    if len(text) > MAX_STRING:
        where.fail(f"param {key}: string longer than {MAX_STRING} characters ({len(text)})")
    return text


def _number(text: str, key: int, where: Where) -> int | float:
    """ncnn's rule on the token text: '.', 'e' or 'E' makes a float, anything else an int."""
    if any(ch in text for ch in ".eE"):
        if not _FLOAT.match(text):
            where.fail(f"param {key}: {text[:40]!r} is not a number")
        return float(text)
    value = parse_int(text)
    if value is None:
        where.fail(f"param {key}: {text[:40]!r} is not a number")
    if not _INT32_MIN <= value <= _INT32_MAX:
        where.fail(f"param {key}: {value} does not fit in a 32-bit int")
    return value


def parse_int(text: str) -> int | None:
    """The int ``%d`` reads from the whole token, or None; huge values saturate past int64
    (``int()`` refuses strings over 4300 digits, and no caller needs the exact value)."""
    if not _INT.match(text):
        return None
    if len(text.lstrip("+-").lstrip("0")) > 18:
        return -(2**63) if text.startswith("-") else 2**63
    return int(text)


def _check_reserved(key: int, value: ParamValue, where: Where) -> ParamValue:
    """Ids 30 and 31 mean the same for every layer; check their types once, here."""
    if key == FEATMASK_ID and not isinstance(value, int):
        where.fail(f"param 31 (featmask) must be an int, got {value!r}")
    if key == SHAPE_HINTS_ID:
        if isinstance(value, int):
            return (value,)
        if not isinstance(value, tuple) or any(isinstance(v, float) for v in value):
            where.fail(f"param 30 (shape hints) must be an int array, got {value!r}")
    return value


__all__ = (
    "FEATMASK_ID",
    "MAX_PARAM_ID",
    "MAX_STRING",
    "OLD_ARRAY_BASE",
    "SHAPE_HINTS_ID",
    "TOKEN",
    "WS",
    "Where",
    "parse_int",
    "parse_params",
)
