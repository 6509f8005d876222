"""The public API: everything in ``__all__`` exists, and nothing public is missing from it."""

from __future__ import annotations

import asyncvk


def test_all_names_exist() -> None:
    for name in asyncvk.__all__:
        assert hasattr(asyncvk, name), name


def test_public_names_are_listed() -> None:
    public = {n for n in vars(asyncvk) if not n.startswith("_")}
    modules = {"cache", "gpu", "layers", "net", "shader", "cli", "serve"}
    assert public - modules - {"annotations"} <= set(asyncvk.__all__)


def test_every_public_name_says_what_it_does() -> None:
    """Every public name, and every public method and property of the public classes, has a
    docstring; the ones a user reaches for first say what they raise and show an example."""
    import inspect

    missing = []
    for name in asyncvk.__all__:
        value = getattr(asyncvk, name)
        if name != "__version__" and not inspect.getdoc(value):
            missing.append(name)
        if not inspect.isclass(value):
            continue
        for attr, member in vars(value).items():
            if attr.startswith("_"):
                continue
            function = member.fget if isinstance(member, property) else member
            if isinstance(function, (staticmethod, classmethod)):
                function = function.__func__
            if callable(function) and not inspect.getdoc(function):
                missing.append(f"{name}.{attr}")
    assert not missing, missing
    first = (
        asyncvk.Net.load_param,
        asyncvk.Net.load_model,
        asyncvk.Net.run,
        asyncvk.Net.create_extractor,
        asyncvk.Extractor.extract,
        asyncvk.Extractor.input,
        asyncvk.get_gpu_info,
        asyncvk.get_gpu_device,
        asyncvk.PipelineCache,
    )
    for item in first:
        doc = inspect.getdoc(item) or ""
        assert "Raises:" in doc, item.__qualname__
    for item in (*first[:5], asyncvk.Net, asyncvk.Option, asyncvk.get_gpu_count):
        doc = inspect.getdoc(item) or ""
        assert "Example" in doc, item.__qualname__


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
    assert repr(asyncvk.Option()) == "Option()"
    option = asyncvk.Option(use_fp16_storage=True, remote_cache="redis://:secret@host/0")
    assert repr(option) == "Option(use_fp16_storage=True, remote_cache=<set>)"
    with asyncvk.PipelineCache() as cache:
        assert repr(cache) == (
            "<PipelineCache [entries: 0, in-flight: 0 | hits: 0, created: 0, spirv compiled: 0]>"
        )
