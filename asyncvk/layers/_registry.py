"""The registry of layer types by ncnn type name."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from ._base import Layer

_L = TypeVar("_L", bound=type[Layer])
_REGISTRY: dict[str, type[Layer]] = {}


def register_layer(type_name: str) -> Callable[[_L], _L]:
    """Class decorator: make ``cls`` the implementation of ncnn layer ``type_name``."""

    def decorate(cls: _L) -> _L:
        if type_name in _REGISTRY:
            raise ValueError(f"layer type {type_name!r} registered twice")
        cls.type_name = type_name
        _REGISTRY[type_name] = cls
        return cls

    return decorate


def layer_class(type_name: str) -> type[Layer] | None:
    """The class for ``type_name``, or None when asyncvk does not implement it."""
    return _REGISTRY.get(type_name)


def layer_types() -> tuple[str, ...]:
    """Every registered ncnn type name, sorted."""
    return tuple(sorted(_REGISTRY))
