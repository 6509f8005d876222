"""ncnn layers: one module per layer type, each with its numpy reference."""

from ._base import Layer as Layer
from ._base import ModelBin as ModelBin
from ._registry import layer_class as layer_class
from ._registry import layer_types as layer_types
from ._registry import register_layer as register_layer

__all__ = ("Layer", "ModelBin", "layer_class", "layer_types", "register_layer")
