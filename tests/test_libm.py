"""layers/_libm.expf against the C library's expf itself, argument by argument.

The array path asks the C library only near a rounding midpoint; this checks that it gives
the C library's result everywhere: normal results, subnormal ones, overflow, and the special
values.
"""

from __future__ import annotations

import numpy as np
import pytest

from asyncvk.layers import _libm


@pytest.mark.skipif(_libm._C_EXPF is None, reason="no C library expf to compare with")
def test_expf_is_the_c_librarys_bit_for_bit() -> None:
    rng = np.random.default_rng(19)
    x = np.concatenate(
        [
            rng.standard_normal(100_000) * 4,  # ordinary logits
            rng.uniform(-103.98, -87.33, 20_000),  # subnormal results
            rng.uniform(88.6, 88.8, 1_000),  # around overflow
            [np.nan, np.inf, -np.inf, 0.0, -0.0, -200.0, 200.0],
        ]
    ).astype(np.float32)
    function = _libm._C_EXPF
    assert function is not None
    with np.errstate(all="ignore"):
        got = _libm.expf(x)
    wanted = np.array([function(v) for v in x.tolist()], dtype=np.float32)
    assert got.dtype == np.float32 and got.shape == x.shape
    differ = np.flatnonzero(got.view(np.uint32) != wanted.view(np.uint32))
    assert differ.size == 0, f"{differ.size} differ, e.g. expf({x[differ[:3]]})"
    # the shortcut matters: numpy's own rounding differs from the C library's somewhere
    with np.errstate(all="ignore"):
        rounded = np.exp(x.astype(np.float64)).astype(np.float32)
    assert (rounded.view(np.uint32) != wanted.view(np.uint32)).any()
