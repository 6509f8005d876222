"""Param: one ncnn layer parameter declared once (id, name, type, default, limit).

A layer class lists its params as class attributes::

    kernel_w = Param(1, int, 0, limit=MAX_KERNEL)
    kernel_h = Param(11, int, kernel_w, limit=MAX_KERNEL)  # defaults to kernel_w's value

``Layer.load_param`` reads them from the ParamDict in declaration order (a default that names
another param takes that param's parsed value) and stores each value on the instance, so the
numpy reference and the GPU path read the same attributes. A mistake in a declaration (an id
given twice, a default of the wrong type, a default naming a param declared later or in another
class) raises at import, not when a user's model is read. Param ids a layer does not declare are
ignored, as ncnn's ``pd.get`` ignores them.
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar, overload

from ._limits import check_param
from ._paramdict import ParamDict

T = TypeVar("T")
E = TypeVar("E", int, float)


class Array(Generic[E]):
    """The type of an array param: ``ints`` or ``floats``."""

    def __init__(self, element: type[E]) -> None:
        self.element: type[E] = element

    def __repr__(self) -> str:
        return f"{self.element.__name__}s"


ints: Array[int] = Array(int)
floats: Array[float] = Array(float)


class Param(Generic[T]):
    """A class attribute that declares one param; on an instance, its parsed value."""

    name: str = ""
    owner: type | None = None

    @overload
    def __init__(
        self: Param[int],
        id: int,
        kind: type[int],
        default: int | Param[int] = 0,
        *,
        limit: int | None = None,
    ) -> None: ...
    @overload
    def __init__(
        self: Param[float],
        id: int,
        kind: type[float],
        default: float | Param[float] = 0.0,
        *,
        limit: None = None,
    ) -> None: ...
    @overload
    def __init__(
        self: Param[str], id: int, kind: type[str], default: str = "", *, limit: None = None
    ) -> None: ...
    @overload
    def __init__(
        self: Param[tuple[int, ...]],
        id: int,
        kind: Array[int],
        default: tuple[int, ...] = (),
        *,
        limit: None = None,
    ) -> None: ...
    @overload
    def __init__(
        self: Param[tuple[float, ...]],
        id: int,
        kind: Array[float],
        default: tuple[float, ...] = (),
        *,
        limit: None = None,
    ) -> None: ...
    def __init__(self, id: int, kind: Any, default: Any = None, *, limit: int | None = None):
        if not 0 <= id <= 31:
            raise TypeError(f"param id {id} is outside ncnn's 0..31")
        if default is None:
            default = {int: 0, float: 0.0, str: ""}.get(kind, ())
        if limit is not None and kind is not int:
            raise TypeError(f"param {id}: only int params take a limit")
        if not isinstance(default, Param) and not _fits(kind, default):
            raise TypeError(f"param {id}: default {default!r} is not of type {kind!r}")
        self.id = id
        self.kind = kind
        self.default = default
        self.limit = limit

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.owner = owner

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> Param[T]: ...
    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> T: ...
    def __get__(self, obj: object, objtype: type | None = None) -> Param[T] | T:
        if obj is None:
            return self
        # not parsed yet (a layer made by hand): the default, as ncnn's constructor sets it
        default = self.default
        return default.__get__(obj) if isinstance(default, Param) else default

    def read(self, layer: object, pd: ParamDict) -> T:
        """The value ``pd`` gives (or the default), type- and limit-checked."""
        default = self.default
        if isinstance(default, Param):
            default = layer.__dict__[default.name]
        kind = self.kind
        value: Any
        if kind is int:
            value = pd.get_int(self.id, default)
            if self.limit is not None:
                check_param(type(layer).type_name, self.id, self.name, value, self.limit)  # type: ignore[attr-defined]
        elif kind is float:
            value = pd.get_float(self.id, default)
        elif kind is str:
            value = pd.get_str(self.id, default)
        elif kind is ints:
            value = pd.get_ints(self.id, default)
        else:
            value = pd.get_floats(self.id, default)
        return value

    def __repr__(self) -> str:
        return f"Param({self.id}, {getattr(self.kind, '__name__', self.kind)!s}) {self.name}"


def _fits(kind: Any, value: object) -> bool:
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if isinstance(kind, Array):
        return isinstance(value, tuple) and all(_fits(kind.element, v) for v in value)
    return type(value) is kind


def collect_params(cls: type) -> tuple[Param[Any], ...]:
    """Every Param of ``cls`` (base classes first), checked: ids unique, defaults that name a
    param name one of this class declared before."""
    found: dict[str, Param[Any]] = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, Param):
                found[name] = value  # a redeclared param keeps its place
            elif name in found:  # a subclass replaced a param with a plain value
                del found[name]
    params = tuple(found.values())
    seen: dict[int, str] = {}
    for p in params:
        if p.id in seen:
            raise TypeError(
                f"{cls.__name__}: param id {p.id} declared as {seen[p.id]} and {p.name}"
            )
        seen[p.id] = p.name
        if isinstance(p.default, Param):
            ref = p.default
            earlier = params[: params.index(p)]
            if ref not in earlier:
                raise TypeError(
                    f"{cls.__name__}.{p.name}: default names {ref.name or ref!r}, which is not a "
                    f"param of {cls.__name__} declared before it"
                )
            if ref.kind is not p.kind:
                raise TypeError(f"{cls.__name__}.{p.name}: default {ref.name} has another type")
    return params


def read_params(layer: object, params: tuple[Param[Any], ...], pd: ParamDict) -> None:
    """Store each param's value from ``pd`` on ``layer``, in declaration order."""
    store = layer.__dict__
    for p in params:
        store[p.name] = p.read(layer, pd)
