"""Param schemas: read once from a ParamDict, defaults that follow another param, limits, and
declaration mistakes that fail when the class is made (at import), not on a user's model."""

from __future__ import annotations

import pytest

from asyncvk.layers import Layer
from asyncvk.layers._limits import MAX_KERNEL
from asyncvk.layers._paramdict import ParamDict
from asyncvk.layers._schema import Param, floats, ints


class _Sample(Layer):
    type_name = "Sample"
    kernel_w = Param(1, int, 0, limit=MAX_KERNEL)
    kernel_h = Param(11, int, kernel_w, limit=MAX_KERNEL)
    eps = Param(2, float, 0.5)
    axes = Param(3, ints)
    coeffs = Param(4, floats, (1.0,))


def test_params_are_read_with_defaults_that_follow_another_param() -> None:
    layer = _Sample()
    layer.load_param(ParamDict({1: 3, 3: (0, 2)}))
    assert (layer.kernel_w, layer.kernel_h, layer.eps) == (3, 3, 0.5)
    assert (layer.axes, layer.coeffs) == ((0, 2), (1.0,))
    layer.load_param(ParamDict({1: 3, 11: 5, 2: 1}))
    assert (layer.kernel_h, layer.eps) == (5, 1.0)
    assert isinstance(layer.eps, float)


def test_an_unparsed_layer_reads_the_defaults() -> None:
    layer = _Sample()
    assert (layer.kernel_w, layer.kernel_h, layer.coeffs) == (0, 0, (1.0,))


def test_limits_and_types_name_the_param() -> None:
    with pytest.raises(ValueError, match=r"Sample param 11 \(kernel_h\) = 5000 exceeds"):
        _Sample().load_param(ParamDict({11: 5000}))
    with pytest.raises(TypeError, match="param 1 must be a 32-bit int"):
        _Sample().load_param(ParamDict({1: 1.5}))


def test_unknown_param_ids_are_ignored() -> None:
    layer = _Sample()
    layer.load_param(ParamDict({7: 9, 30: (1, 2)}))
    assert layer.kernel_w == 0


def test_the_schema_is_collected_in_declaration_order() -> None:
    assert [p.name for p in _Sample.params] == ["kernel_w", "kernel_h", "eps", "axes", "coeffs"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("a = Param(1, int); b = Param(1, float)", "param id 1 declared as a and b"),
        ("a = Param(1, int, 0.5)", "default 0.5 is not of type"),
        ("a = Param(1, float, limit=3)", "only int params take a limit"),
        ("a = Param(40, int)", "outside ncnn's 0..31"),
        ("b = Param(2, int, OTHER); a = Param(1, int)", "not a param of Bad declared before"),
        ("a = Param(1, int); b = Param(2, float, a)", "default a has another type"),
    ],
)
def test_a_mistake_in_a_schema_fails_when_the_class_is_made(body: str, message: str) -> None:
    source = "class Bad(Layer):\n    " + body.replace("; ", "\n    ")
    scope = {"Layer": Layer, "Param": Param, "OTHER": Param(5, int)}
    with pytest.raises(TypeError, match=message):
        exec(source, scope)
