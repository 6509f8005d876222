"""docs/layers.md is the registry's table: adding a layer type without regenerating it fails
here, with the command that regenerates it."""

from __future__ import annotations

from pathlib import Path

from asyncvk.layers import Layer, layer_class
from asyncvk.layers._catalog import REGENERATE, layer_catalog, layers_markdown
from asyncvk.layers._ncnn_types import NCNN_LAYER_TYPES

DOC = Path(__file__).resolve().parent.parent / "docs" / "layers.md"


def test_docs_layers_md_is_up_to_date_with_the_registry() -> None:
    expected = layers_markdown(layer_catalog())
    committed = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    assert committed == expected, f"docs/layers.md is stale: run `{REGENERATE}`"


def test_the_catalog_states_each_class_as_registered_and_every_ncnn_type() -> None:
    catalog = layer_catalog()
    assert [info.type for info in catalog] == sorted((i.type for i in catalog), key=str.lower)
    assert set(NCNN_LAYER_TYPES) <= {info.type for info in catalog}
    for info in catalog:
        cls = layer_class(info.type)
        if info.runs_on == "none":
            assert cls is None and info.type in NCNN_LAYER_TYPES and not info.family
            continue
        assert cls is not None and cls.type_name == info.type
        assert info.runs_on == ("GPU" if cls.gpu else "CPU")
        assert info.cpu_for_some_inputs == (cls.gpu and cls.supports is not Layer.supports)
        assert cls.__module__ == f"asyncvk.layers.{info.family}"
