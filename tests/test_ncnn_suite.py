"""Every model of ncnn's benchmark suite (``tests/ncnn_benchmark/``) on asyncvk's GPU path
(lavapipe in CI, Option defaults: fp32 storage) against the ncnn wheel's CPU fp32 output, with
the seeded weights and inputs of ``ncnn_suite.py``: every output blob within rel L2 1e-3, and no
layer on the CPU unless its type is post-processing or bookkeeping (``CPU_ALLOWED``).

A model with a layer type asyncvk does not register yet, or one whose class has no GPU path and
is not allowed on the CPU, is a strict xfail naming the types (computed from the registry at
collection), so it runs, and must pass, once they all land.
Weights live in a per-session folder; the big ones (vgg16's 553 MB) are deleted after use.
Models that take any input size run smaller in CI (``ncnn_suite.CI_SIZES``);
``ASYNCVK_SUITE_NATIVE=1`` runs every one at benchncnn's size.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import Model, ncnn_forward
from ncnn_suite import (
    CPU_ALLOWED,
    SLOW_MODELS,
    SUITE_DIR,
    check_plan,
    compare_with_ncnn,
    cpu_only_types,
    match_rows,
    missing_types,
    ncnn_read_sizes,
    rel_l2,
    suite_params,
    weight_plan,
    write_model,
)

from asyncvk._errors import ModelFormatError
from asyncvk.net._param_parser import parse_param

pytest.importorskip("ncnn")
pytestmark = needs_vulkan

REL_L2 = 1e-3
#: Weight files over this size are deleted once their model has run.
KEEP_BYTES = 64 << 20


def _case(param: Path) -> object:
    marks = [pytest.mark.slow, pytest.mark.timeout(900)] if param.stem in SLOW_MODELS else []
    parsed = parse_param(param)
    if missing := missing_types(parsed):
        reason = f"asyncvk lacks layer types {', '.join(missing)}"
        marks.append(pytest.mark.xfail(strict=True, raises=ModelFormatError, reason=reason))
    elif cpu_only := cpu_only_types(parsed):
        reason = f"no GPU path yet for {', '.join(cpu_only)}"
        marks.append(pytest.mark.xfail(strict=True, raises=AssertionError, reason=reason))
    return pytest.param(param, id=param.stem, marks=marks)


@pytest.fixture(scope="session")
def weights_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ncnn_suite_weights")


def _drop_big_weights(folder: Path, stem: str) -> None:
    for path in folder.glob(f"{stem}-*.bin"):
        if path.stat().st_size > KEEP_BYTES:
            path.unlink()


def test_every_suite_model_is_here() -> None:
    assert len(suite_params()) == 27


def test_a_weight_the_walk_does_not_know_is_an_error(tmp_path: Path) -> None:
    param = tmp_path / "prelu.param"
    param.write_text("7767517\n2 2\nInput in0 0 1 in0\nPReLU act 1 1 in0 out0 0=3\n")
    with pytest.raises(ValueError, match=r"1 more reads \(12 bytes\).*does not know"):
        check_plan(param, weight_plan(parse_param(param)), ncnn_read_sizes(param))


def test_batchnorm_variances_are_positive_and_weights_scale_by_fan_in() -> None:
    plan = weight_plan(parse_param(SUITE_DIR / "squeezenet_ssd.param"))
    rng = np.random.default_rng(0)
    variances = [t.values(rng) for t in plan if t.role == "variance"]
    assert variances and all(v.min() >= 0.5 and v.max() <= 1.5 for v in variances)
    conv = next(t for t in plan if t.role == "weight")
    std = float(np.std(conv.values(rng)))
    assert conv.fan_in > 1 and std == pytest.approx(conv.gain / np.sqrt(conv.fan_in), rel=0.05)


def test_detection_rows_that_tie_on_score_pair_up_but_a_moved_box_shows() -> None:
    theirs = np.array([[1, 0.5, 0.1, 0.1, 0.4, 0.4], [2, 0.5, 0.6, 0.6, 0.9, 0.9]], np.float32)
    swapped = theirs[::-1] + np.float32(1e-7)
    assert rel_l2(match_rows(swapped, theirs), theirs)[0] < 1e-6
    moved = swapped.copy()
    moved[0, 2] += 0.2
    assert rel_l2(match_rows(moved, theirs), theirs)[0] > 1e-2


def test_softmax_logits_are_calibrated(weights_folder: Path) -> None:
    """Fan-in scaling alone leaves squeezenet's logits near 0 (a flat softmax hides errors)."""
    model = write_model(SUITE_DIR / "squeezenet.param", weights_folder)
    logits = ncnn_forward(
        Model(model.param, model.bin), {model.input_name: model.input}, ["pool10"]
    )
    assert float(np.std(logits["pool10"])) == pytest.approx(2.0, rel=1e-3)


@pytest.mark.parametrize("param", [_case(p) for p in suite_params()])
async def test_model_matches_ncnn(param: Path, weights_folder: Path) -> None:
    try:
        result = await compare_with_ncnn(param, weights_folder)
    finally:
        _drop_big_weights(weights_folder, param.stem)
    assert not result.problems, result.problems
    worse = {blob: f"{rel:.2e}" for blob, rel in result.rel_l2.items() if not rel < REL_L2}
    assert not worse, f"rel L2 over {REL_L2} (input {result.input_shape}): {worse}"
    assert result.cpu_types <= CPU_ALLOWED, f"ran on the CPU: {result.cpu_types - CPU_ALLOWED}"
