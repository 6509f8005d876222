"""What an Extractor reads of the Net that made it: the model loaded now, and whether that is
still the one the extractor was made for. A protocol, so that extractors do not import the Net
(a Net makes extractors; nothing below it names a Net)."""

from __future__ import annotations

from typing import Protocol

from ._gpu_model import GpuModel
from ._graph import Graph


class LoadedModel(Protocol):
    """A Net, as its extractors see it."""

    @property
    def graph(self) -> Graph | None:
        """The parsed model (None before ``load_param``)."""

    @property
    def gpu_model(self) -> GpuModel | None:
        """The model on a device (None on the CPU, or before ``load_model``)."""

    @property
    def generation(self) -> int:
        """Counts the models loaded: an extractor of another generation is stale."""

    @property
    def closed(self) -> bool:
        """Whether the Net was closed."""
