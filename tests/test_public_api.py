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
