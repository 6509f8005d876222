"""ParamDict: the ``id=value`` pairs of one layer line in an ncnn ``.param`` file."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

ParamValue = int | float | str | tuple[int, ...] | tuple[float, ...]
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def _is_int32(value: object) -> bool:
    """An int, or a float with an integer value, that fits ncnn's 32-bit int."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return isinstance(value, int) and _INT32_MIN <= value <= _INT32_MAX


@dataclass(frozen=True)
class ParamDict(Mapping[int, ParamValue]):
    """Parameter values by id (0..31), typed as the file wrote them.

    ncnn's rule: a value with '.', 'e' or 'E' is a float, else an int; arrays are tuples.
    Layers read with defaults, as ncnn's ``pd.get(id, default)`` does; an int given where a
    float is expected is accepted (``get_float``), but not the other way round.
    """

    entries: Mapping[int, ParamValue] = field(default_factory=dict)

    def __getitem__(self, key: int) -> ParamValue:
        return self.entries[key]

    def __iter__(self) -> Iterator[int]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    def get_int(self, key: int, default: int) -> int:
        value = self.entries.get(key, default)
        if isinstance(value, float) and value.is_integer() and _INT32_MIN <= value <= _INT32_MAX:
            return int(value)
        if not isinstance(value, int):
            raise TypeError(f"param {key} must be a 32-bit int, got {value!r}")
        return value

    def get_float(self, key: int, default: float) -> float:
        value = self.entries.get(key, default)
        if not isinstance(value, (int, float)):
            raise TypeError(f"param {key} must be a number, got {value!r}")
        return float(value)

    def get_ints(self, key: int, default: tuple[int, ...] = ()) -> tuple[int, ...]:
        value = self.entries.get(key, default)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = (value,)
        if not isinstance(value, tuple) or not all(_is_int32(v) for v in value):
            raise TypeError(f"param {key} must be an int array, got {value!r}")
        return tuple(int(v) for v in value)

    def get_floats(self, key: int, default: tuple[float, ...] = ()) -> tuple[float, ...]:
        value = self.entries.get(key, default)
        if isinstance(value, (int, float)):
            value = (value,)
        if not isinstance(value, tuple):
            raise TypeError(f"param {key} must be a float array, got {value!r}")
        return tuple(float(v) for v in value)

    def get_str(self, key: int, default: str) -> str:
        value = self.entries.get(key, default)
        if not isinstance(value, str):
            raise TypeError(f"param {key} must be a string, got {value!r}")
        return value
