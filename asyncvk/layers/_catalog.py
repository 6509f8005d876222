"""What the registry offers users: every ncnn layer type, and where asyncvk runs it (the GPU,
the CPU, or not at all).

One source for ``asyncvk layers`` (text and JSON) and ``docs/layers.md`` (its ``--markdown``),
so that the page cannot drift from the code: a test compares the committed page with
:func:`layers_markdown`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from ._base import Layer
from ._ncnn_types import NCNN_LAYER_TYPES
from ._registry import layer_class, layer_types

#: How docs/layers.md is rebuilt; the page and the staleness test both say it.
REGENERATE = "asyncvk layers --markdown > docs/layers.md"


@dataclass(frozen=True)
class LayerInfo:
    """One ncnn type as a user sees it."""

    type: str
    #: "GPU" for types with a Vulkan path, "CPU" for those that run their numpy reference,
    #: "none" for types asyncvk refuses at load.
    runs_on: str
    #: A GPU type that sends some params or input shapes to its CPU reference.
    cpu_for_some_inputs: bool
    #: The module of asyncvk.layers that holds it (its family); "" for a type it lacks.
    family: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def layer_catalog() -> tuple[LayerInfo, ...]:
    """Every ncnn type and every registered one, sorted by name (case-insensitively)."""
    from . import _all  # noqa: F401  (each family module registers its types on import)

    infos = []
    for name in sorted({*layer_types(), *NCNN_LAYER_TYPES}, key=str.lower):
        cls = layer_class(name)
        if cls is None:
            infos.append(LayerInfo(type=name, runs_on="none", cpu_for_some_inputs=False, family=""))
            continue
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
    if info.runs_on == "none":
        return "not supported"
    return "GPU (CPU for some params or shapes)" if info.cpu_for_some_inputs else info.runs_on


def _counts(infos: tuple[LayerInfo, ...]) -> tuple[int, int, int]:
    """Of ncnn's types: (on the GPU, on the CPU, not supported)."""
    on = [info.runs_on for info in infos if info.type in NCNN_LAYER_TYPES]
    return on.count("GPU"), on.count("CPU"), on.count("none")


def _extras(infos: tuple[LayerInfo, ...]) -> str:
    """The types asyncvk runs that ncnn's builds leave out, as a sentence (or "")."""
    extra = [f"{i.type} ({_where(i)})" for i in infos if i.type not in NCNN_LAYER_TYPES]
    return f" Also {', '.join(extra)}, which ncnn's builds leave out." if extra else ""


def layers_text(infos: tuple[LayerInfo, ...]) -> str:
    """The table ``asyncvk layers`` prints."""
    gpu, cpu, none = _counts(infos)
    width = max((len(info.type) for info in infos), default=4)
    lines = [
        f"{gpu + cpu + none} ncnn layer types: {gpu} on the GPU, {cpu} on the CPU, "
        f"{none} not supported.{_extras(infos)}"
    ]
    lines += [f"{info.type:<{width}}  {_where(info)}" for info in infos]
    return "\n".join(lines) + "\n"


def layers_markdown(infos: tuple[LayerInfo, ...]) -> str:
    """docs/layers.md: the same table for the documentation."""
    gpu, cpu, none = _counts(infos)
    lines = [
        "# ncnn layer types in asyncvk",
        "",
        f"<!-- Generated from the layer registry by `{REGENERATE}`; do not edit. -->",
        "",
        f"Of ncnn's {gpu + cpu + none} layer types, asyncvk runs {gpu} on the GPU (Vulkan) and "
        f"{cpu} on the CPU (their numpy reference, between GPU steps); {none} are not supported. "
        'A GPU type marked "CPU for some params or shapes" runs its numpy reference for the '
        "cases its shader does not cover. A model with a type that is not supported is refused "
        f"at load, with every such type and its lines named.{_extras(infos)}",
        "",
        "`asyncvk layers` prints this table for the installed version (`--json` for tools).",
        "",
        "| Type | Runs on | Module |",
        "| --- | --- | --- |",
    ]
    lines += [
        f"| {info.type} | {_where(info)} | "
        + (f"`asyncvk/layers/{info.family}.py` |" if info.family else "|")
        for info in infos
    ]
    return "\n".join(lines) + "\n"


__all__ = ("REGENERATE", "LayerInfo", "layer_catalog", "layers_markdown", "layers_text")
