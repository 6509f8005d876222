"""What the registry offers users: each supported ncnn type and where it runs.

One source for ``asyncvk layers`` (text and JSON) and ``docs/layers.md`` (its ``--markdown``),
so that the page cannot drift from the code: a test compares the committed page with
:func:`layers_markdown`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ._base import Layer
from ._registry import layer_class, layer_types

#: How docs/layers.md is rebuilt; the page and the staleness test both say it.
REGENERATE = "asyncvk layers --markdown > docs/layers.md"


@dataclass(frozen=True)
class LayerInfo:
    """One supported type as a user sees it."""

    type: str
    #: "GPU" for types with a Vulkan path, "CPU" for those that run their numpy reference.
    runs_on: str
    #: A GPU type that sends some params or input shapes to its CPU reference.
    cpu_for_some_inputs: bool
    #: The module of asyncvk.layers that holds it (its family).
    family: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def layer_catalog() -> tuple[LayerInfo, ...]:
    """Every registered type, sorted by name."""
    from . import _all  # noqa: F401  (each family module registers its types on import)

    infos = []
    for name in layer_types():
        cls = layer_class(name)
        assert cls is not None  # layer_types lists registered names only
        infos.append(
            LayerInfo(
                type=name,
                runs_on="GPU" if cls.gpu else "CPU",
                cpu_for_some_inputs=cls.gpu and cls.supports is not Layer.supports,
                family=cls.__module__.rsplit(".", 1)[-1],
            )
        )
    return tuple(infos)


def _where(info: LayerInfo) -> str:
    return "GPU (CPU for some params or shapes)" if info.cpu_for_some_inputs else info.runs_on


def layers_text(infos: tuple[LayerInfo, ...]) -> str:
    """The table ``asyncvk layers`` prints."""
    on_gpu = sum(info.runs_on == "GPU" for info in infos)
    width = max((len(info.type) for info in infos), default=4)
    lines = [
        f"{len(infos)} ncnn layer types: {on_gpu} on the GPU, {len(infos) - on_gpu} on the CPU"
    ]
    lines += [f"{info.type:<{width}}  {_where(info)}" for info in infos]
    return "\n".join(lines) + "\n"


def layers_markdown(infos: tuple[LayerInfo, ...]) -> str:
    """docs/layers.md: the same table for the documentation."""
    on_gpu = sum(info.runs_on == "GPU" for info in infos)
    lines = [
        "# Supported ncnn layer types",
        "",
        f"<!-- Generated from the layer registry by `{REGENERATE}`; do not edit. -->",
        "",
        f"asyncvk loads {len(infos)} ncnn layer types: {on_gpu} run on the GPU (Vulkan), "
        f"{len(infos) - on_gpu} on the CPU (their numpy reference, between GPU steps). "
        'A GPU type marked "CPU for some params or shapes" runs its numpy reference for the '
        "cases its shader does not cover. A model with any other type is refused at load, "
        "with every missing type and its lines named.",
        "",
        "`asyncvk layers` prints this table for the installed version (`--json` for tools).",
        "",
        "| Type | Runs on | Module |",
        "| --- | --- | --- |",
    ]
    lines += [
        f"| {info.type} | {_where(info)} | `asyncvk/layers/{info.family}.py` |" for info in infos
    ]
    return "\n".join(lines) + "\n"


__all__ = ("REGENERATE", "LayerInfo", "layer_catalog", "layers_markdown", "layers_text")
