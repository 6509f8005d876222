"""The models a server serves: found in a folder (``NAME/model.param`` + ``model.bin``) or
named one by one, each with its Net and its batcher, all on one device and one pipeline cache."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ..net._net import Net
from ._batcher import Batcher

#: what a model's name may hold: it is a URL path segment and a metrics label
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


@dataclass(frozen=True)
class ModelFiles:
    """One model to serve: its name (in URLs) and its two files."""

    name: str
    param: str
    bin: str

    def __post_init__(self) -> None:
        check_name(self.name, f"model {self.param}")


def check_name(name: str, where: str) -> None:
    """ValueError unless ``name`` can be a model's name in a URL and a metrics label."""
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(
            f"{where}: the name {name!r} must be letters, digits, '_', '.' and '-' "
            "(starting with a letter or digit, at most 128)"
        )


def name_for(param: str) -> str:
    """A model's default name: its ``.param``'s stem, or its folder's name for
    ``NAME/model.param``."""
    folder, file = os.path.split(os.path.abspath(param))
    stem = os.path.splitext(file)[0]
    return os.path.basename(folder) if stem == "model" else stem


def find_models(folder: str) -> list[ModelFiles]:
    """Every ``folder/NAME/model.param`` with its ``model.bin``, by name; ValueError naming
    what is wrong (no such folder, no model in it, a model without its weights)."""
    if not os.path.isdir(folder):
        raise ValueError(f"--models {folder}: no such folder")
    found = []
    for name in sorted(os.listdir(folder)):
        param = os.path.join(folder, name, "model.param")
        if not os.path.isfile(param):
            continue
        weights = os.path.join(folder, name, "model.bin")
        if not os.path.isfile(weights):
            raise ValueError(f"--models {folder}: {param} has no model.bin beside it")
        found.append(ModelFiles(name, param, weights))
    if not found:
        raise ValueError(f"--models {folder}: no NAME/model.param in it")
    return found


@dataclass(eq=False)
class ServedModel:
    """A model in the server: its files, its Net and batcher, and how its load went."""

    files: ModelFiles
    net: Net
    batcher: Batcher
    ready: bool = False
    error: str | None = None
    load_seconds: float = 0.0
    warm_up_seconds: float = 0.0
    #: wall-clock time of the last inference, in ms since the epoch (0: none yet)
    last_inference_ms: int = 0
    versions: tuple[str, ...] = field(default=("1",))

    @property
    def name(self) -> str:
        return self.files.name
