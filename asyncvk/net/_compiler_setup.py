"""Whether a Net's load may compile GLSL; if it may, glslang's set-up starts on a thread now.

The set-up is a compile's worth of C (80-130 ms), which a cold load's first compile would
otherwise wait for. A load that cannot compile (a cache file holding SPIR-V, an install that
compiled every shader, a remote cache that answers) sets nothing up.
"""

from __future__ import annotations

import os

from ._option import Option


def prepare_compiler_for(opt: Option) -> None:
    """Start the GLSL compiler's set-up unless a load with ``opt`` cannot need it."""
    if opt.use_vulkan_compute is False:
        return
    cache = opt.pipeline_cache
    if cache is not None and cache.statistics().spirv_entries:
        return  # warm from a cache file: nothing to compile, most likely
    from ..shader._packaged import packaged_complete

    if packaged_complete() and (cache is None or cache.use_packaged):
        return  # the install compiled every shader
    # only a load that may compile needs it; with a remote cache, only if it is down
    from ..cache._early_setup import prepare_compiler_unless_served

    folder = opt.cache_dir
    prepare_compiler_unless_served(opt.remote_cache, None if folder is None else os.fspath(folder))
