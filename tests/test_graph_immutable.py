"""A Graph is never changed once made: reading weights makes a new Graph with copied layers,
so the Graph a ``.param`` gave holds no weights after a load, or after a load that failed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from ncnn_suite import suite_params

from asyncvk import ModelFormatError
from asyncvk.net._graph import Graph, build_graph, load_weights
from asyncvk.net._modelbin import ModelBinReader
from asyncvk.net._param_parser import parse_param
from asyncvk.net._random_weights import random_weights

MODELS = Path(__file__).parent / "models"


def _state(graph: Graph) -> list[dict[str, Any]]:
    """Every layer's attributes: arrays by identity and bytes, the rest by value."""

    def value(v: Any) -> Any:
        if isinstance(v, np.ndarray):
            return (id(v), v.tobytes())
        return repr(v)

    return [{k: value(v) for k, v in vars(n.layer).items()} for n in graph.nodes]


def _params() -> list[Path]:
    return [*sorted(MODELS.glob("*/model.param")), *suite_params()]


@pytest.mark.parametrize("param", _params(), ids=lambda p: p.parent.name + "/" + p.stem)
def test_reading_weights_leaves_the_graph_as_it_was(param: Path) -> None:
    graph = build_graph(parse_param(param))
    before = _state(graph)
    loaded = load_weights(graph, ModelBinReader(random_weights(param)))
    assert _state(graph) == before
    assert not graph.weights_loaded and loaded.weights_loaded
    assert all(a.layer is not b.layer for a, b in zip(graph.nodes, loaded.nodes, strict=True))
    assert _state(loaded) != before or not any(vars(n.layer) for n in loaded.nodes)


def test_a_load_that_fails_leaves_nothing_in_the_graph() -> None:
    param = MODELS / "squeezenet" / "model.param"
    graph = build_graph(parse_param(param))
    before = _state(graph)
    short = random_weights(param)[:-4096]
    with pytest.raises(ModelFormatError):
        load_weights(graph, ModelBinReader(short))
    assert _state(graph) == before


def test_loading_a_loaded_graph_again_makes_fresh_layers() -> None:
    param = MODELS / "cunet" / "model.param"
    first = load_weights(build_graph(parse_param(param)), ModelBinReader(random_weights(param)))
    before = _state(first)
    second = load_weights(first, ModelBinReader(random_weights(param, seed=1)))
    assert _state(first) == before and _state(second) != before
