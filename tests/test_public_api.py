"""The public API: everything in ``__all__`` exists, and nothing public is missing from it."""

from __future__ import annotations

import asyncvk


def test_all_names_exist() -> None:
    for name in asyncvk.__all__:
        assert hasattr(asyncvk, name), name


def test_public_names_are_listed() -> None:
    public = {n for n in vars(asyncvk) if not n.startswith("_")}
    modules = {"cache", "gpu", "layers", "net", "shader", "cli"}
    assert public - modules - {"annotations"} <= set(asyncvk.__all__)


def test_the_everyday_api_says_what_it_does() -> None:
    """Every public method and property of what a user touches first has a docstring, and the
    ones a user calls in every program say what they raise and show an example."""
    import inspect

    import asyncvk

    missing = []
    for cls in (asyncvk.Net, asyncvk.Extractor, asyncvk.Option, asyncvk.PipelineCache):
        for name, value in vars(cls).items():
            if name.startswith("_"):
                continue
            function = value.fget if isinstance(value, property) else value
            if callable(function) and not inspect.getdoc(function):
                missing.append(f"{cls.__name__}.{name}")
    assert not missing, missing
    for method in (asyncvk.Extractor.extract, asyncvk.Net.create_extractor):
        doc = inspect.getdoc(method) or ""
        assert "Raises:" in doc and "Example" in doc, method.__qualname__


async def test_reprs_say_what_they_hold() -> None:
    from pathlib import Path

    import numpy as np

    import asyncvk

    model = Path(__file__).parent / "models" / "cunet"
    net = asyncvk.Net(asyncvk.Option(use_vulkan_compute=False))
    assert repr(net) == "<Net [no model]>"
    await net.load_param(model / "model.param")
    assert repr(net) == "<Net [19 layers, inputs in0, outputs out0 | not loaded]>"
    await net.load_model(model / "model.bin")
    assert repr(net) == "<Net [19 layers, inputs in0, outputs out0 | cpu (numpy)]>"
    ex = net.create_extractor()
    assert repr(ex) == "<Extractor [inputs set: none, 0 blobs computed]>"
    ex.input("in0", np.zeros((3, 44, 44), np.float32))
    assert repr(ex) == "<Extractor [inputs set: in0, 0 blobs computed]>"
    await ex.extract("out0")
    assert repr(ex) == "<Extractor [inputs set: in0, 1 blobs computed]>"
    ex.input("in0", np.zeros((2, 3, 44, 44), np.float32))
    assert repr(ex) == "<Extractor [inputs set: in0, batch of 2, 0 blobs computed]>"
    await net.aclose()
    assert repr(net) == "<Net [closed]>"
