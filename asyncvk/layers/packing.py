"""Packing: ncnn's conversion between packed layouts (``elempack``) and storage types.

asyncvk keeps every blob unpacked float32, so converting the layout changes nothing a later
layer sees: ncnn unpacks again before any layer that does not take packed blobs and before it
hands a blob out. Packing is therefore the identity here (on the GPU an alias of its input),
except where ncnn's output means something else:

- ``use_padding`` with a packed count (w of a 1-D blob, h of a 2-D one, c otherwise) that is
  not a multiple of ``out_elempack``: ncnn rounds the count up and leaves the new lanes
  unwritten, so the unpacked blob grows by values it never wrote. Refused for such inputs.
- cast types other than auto (0) and fp32 (1): ncnn's CPU Packing ignores them and keeps the
  bytes, its Vulkan Packing converts to fp16, int8 or bf16 (rounding the values); what the
  model means depends on the backend, so they are refused at load.
"""

from __future__ import annotations

import numpy as np

from ._base import Shape, ShareInputOnGpu
from ._registry import register_layer
from ._schema import Param

#: ncnn's cast types: 0 auto, 1 fp32, 2 fp16, 3 int32, 4 int8, 5 bf16.
_CAST_NAMES = {0: "auto", 1: "fp32", 2: "fp16", 3: "int32", 4: "int8", 5: "bf16"}


@register_layer("Packing")
class Packing(ShareInputOnGpu):
    """The identity on float32 blobs (see the module notes for what is refused)."""

    out_elempack = Param(0, int, 1)
    use_padding = Param(1, int, 0)
    cast_type_from = Param(2, int, 0)
    cast_type_to = Param(3, int, 0)

    def validate(self) -> None:
        if self.out_elempack < 1:
            raise ValueError(
                f"Packing param 0 (out_elempack) = {self.out_elempack} must be >= 1 "
                "(ncnn divides by it)"
            )
        for pid, name, value in (
            (2, "cast_type_from", self.cast_type_from),
            (3, "cast_type_to", self.cast_type_to),
        ):
            if value not in (0, 1):
                kind = _CAST_NAMES.get(value, "unknown")
                raise ValueError(
                    f"Packing param {pid} ({name}) = {value} ({kind}) is not supported: only 0 "
                    "(auto) and 1 (fp32); ncnn's CPU keeps the values and its GPU casts them"
                )

    def output_shapes(self, input_shapes: list[Shape]) -> list[Shape]:
        shape = tuple(input_shapes[0])
        packed = shape[0]  # what ncnn packs: w (1-D), h (2-D) or c, first in numpy order
        if self.use_padding and self.out_elempack > 1 and packed % self.out_elempack:
            axis = {1: "w", 2: "h"}.get(len(shape), "c")
            raise ValueError(
                f"Packing with use_padding pads {axis} = {packed} of {shape} to a multiple of "
                f"{self.out_elempack} with values ncnn never writes"
            )
        return [shape]

    def forward(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        return [inputs[0]]
