"""The registry of layer types by ncnn type name; a type's family module is imported the first
time the type is asked for (``_homes.py`` says where each lives)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TypeVar

from ._base import Layer
from ._homes import HOME

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
    cls = _REGISTRY.get(type_name)
    if cls is None and type_name in HOME:
        importlib.import_module(f"{__package__}.{HOME[type_name]}")  # registers its types
        cls = _REGISTRY.get(type_name)
    return cls


def layer_types() -> tuple[str, ...]:
    """Every implemented ncnn type name, sorted (nothing is imported to say so)."""
    return tuple(sorted(HOME.keys() | _REGISTRY.keys()))
