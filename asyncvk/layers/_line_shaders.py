"""When a reduction gives each line to a whole workgroup (``softmax_lines.comp``,
``pooling_global.comp``) rather than to one invocation.

One invocation per line leaves a GPU idle on the few long lines that end a classifier: a
1000-class softmax took 0.08 ms on the H100 and a 56x56x48 global average pool 0.18 ms, against
a few microseconds for a workgroup per line. A CPU device runs an invocation's loop as fast as
a workgroup's, so it keeps the one-invocation shaders (and compiles no second pipeline).
"""

from __future__ import annotations

from ..gpu._info import GpuInfo

# The device's ShaderChoices say where (line_shaders): "gpu" (devices that are not CPUs),
# "always" (any line) or "never".
#: the shortest line given to a workgroup, and the most lines (past them one invocation per
#: line fills the device by itself)
FEWEST_VALUES = 64
MOST_LINES = 65_536
#: ``LINE_LOCAL`` in shaders/line_reduce.h: the largest workgroup the shared array holds
LARGEST_LOCAL = 256


def offered(info: GpuInfo) -> bool:
    """Whether a layer gets the workgroup-per-line pipeline (built in the background)."""
    return info.takes(info.choices.line_shaders)


def chosen(info: GpuInfo, lines: int, length: int) -> bool:
    """Whether a plan records ``lines`` lines of ``length`` values with a workgroup per line."""
    always = info.choices.line_shaders == "always"
    return always or (length >= FEWEST_VALUES and lines <= MOST_LINES)


def local_size(info: GpuInfo) -> tuple[int, int, int]:
    """A power of two up to LARGEST_LOCAL that the device runs (the halving needs one)."""
    limit = min(
        info.limits.max_compute_workgroup_invocations, info.limits.max_compute_workgroup_size[0]
    )
    size = LARGEST_LOCAL
    while size > limit:
        size //= 2
    return (size, 1, 1)
