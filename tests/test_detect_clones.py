"""The detection loops' AVX2 copies (``HOT`` in layers/_detect.c) give the baseline's bits.

The installed extension runs whichever copy the CPU picks; this builds a second one without
the copies (the x86-64 baseline, SSE2) and holds every wrapper's output against it, bit for bit,
on the maps the layers meet: random logits with ties and NaN, boxes that overlap at every
threshold. On a CPU without AVX2 both are the baseline and the test still checks the build.
"""

from __future__ import annotations

import importlib.util
import subprocess
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from asyncvk.layers import _detect_build, _detect_ext

F32 = np.float32


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModuleType]:
    """The extension built without the AVX2 copies, as its own module."""
    folder = tmp_path_factory.mktemp("detect_baseline")
    try:
        built = _detect_build._builder("_detect_baseline", clones=False).compile(tmpdir=str(folder))
    except Exception as exc:  # no C compiler here (an installed wheel): nothing to compare with
        pytest.skip(f"cannot build the baseline extension: {exc}")
    spec = importlib.util.spec_from_file_location("_detect_baseline", built)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    yield module


def _both(baseline: ModuleType, call: Callable[..., Any], *args: Any) -> tuple[Any, Any]:
    """``call(*args)`` through the installed extension, then through the baseline build."""
    installed = call(*args)
    saved = _detect_ext._ffi, _detect_ext._lib
    _detect_ext._ffi, _detect_ext._lib = baseline.ffi, baseline.lib
    try:
        return installed, call(*args)
    finally:
        _detect_ext._ffi, _detect_ext._lib = saved


def _same_bits(a: Any, b: Any) -> None:
    pairs = zip(a, b, strict=True) if isinstance(a, tuple) else [(a, b)]
    for x, y in pairs:
        x, y = np.asarray(x), np.asarray(y)
        assert x.shape == y.shape and x.dtype == y.dtype
        assert x.tobytes() == y.tobytes()


def _logits(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    x = rng.normal(0, 3, shape).astype(F32)
    x.flat[::97] = x.flat[1::97][: x.flat[::97].size]  # ties between neighbours
    x.flat[5::211] = np.nan
    return x


def _boxes(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    corner = rng.uniform(0, 1, (n, 2)).astype(F32)
    size = rng.uniform(0.01, 0.4, (n, 2)).astype(F32)
    boxes = np.concatenate([corner, corner + size], axis=1)
    return boxes, (size[:, 0] * size[:, 1]).astype(F32)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nms_and_best_class(baseline: ModuleType, seed: int) -> None:
    rng = np.random.default_rng(seed)
    boxes, areas = _boxes(rng, 3000)
    for threshold, multiply in ((0.45, False), (0.3, True), (0.9, False)):
        installed, plain = _both(baseline, _detect_ext.nms, boxes, areas, threshold, multiply)
        _same_bits(installed, plain)
        assert 0 < len(installed) <= len(boxes)
    scores = _logits(rng, (80, 1000))
    _same_bits(*_both(baseline, _detect_ext.best_class, scores, 0.25))


@pytest.mark.parametrize(
    ("v3", "softmax_all"),
    [(False, False), (False, True), (True, False)],  # the v3 decode softmaxes nothing
    ids=["yolo", "yolo-softmax-all", "yolov3"],
)
def test_yolo_decode(baseline: ModuleType, v3: bool, softmax_all: bool) -> None:
    rng = np.random.default_rng(7)
    boxes, classes = 3, 20
    blob = _logits(rng, (boxes * (5 + classes), 26, 26))
    anchors = rng.uniform(0.05, 0.5, (boxes, 2)).astype(F32)

    def decode(threshold: float) -> tuple[np.ndarray, np.ndarray]:
        work = blob.copy()  # softmax_all writes in place
        rows = _detect_ext.yolo_decode(
            work, boxes, classes, anchors, threshold, v3, softmax_all=softmax_all
        )
        return rows, work

    for threshold in (0.01, 0.4, 0.9):
        _same_bits(*_both(baseline, decode, threshold))


def test_ssd_rows(baseline: ModuleType) -> None:
    rng = np.random.default_rng(3)
    priors, classes = 1917, 21
    conf = rng.uniform(0, 1, (priors, classes)).astype(F32)
    boxes, _ = _boxes(rng, priors)
    installed, plain = _both(baseline, _detect_ext.ssd_rows, conf, False, boxes, 0.01, 100, 0.45)
    _same_bits(installed, plain)
    assert len(installed) > 0


def test_the_installed_build_has_the_avx2_copies(baseline: ModuleType) -> None:
    """With gcc 12 or later on x86-64 glibc the installed extension carries the copies, so the
    comparisons above compare two different builds; the baseline build never does."""
    import platform

    assert baseline.lib.detect_has_clones() == 0
    if platform.machine() != "x86_64" or platform.libc_ver()[0] != "glibc":
        pytest.skip("the copies are built on x86-64 glibc only")
    gcc = subprocess.run(["gcc", "-dumpversion"], capture_output=True, text=True)
    if gcc.returncode != 0 or int(gcc.stdout.split(".")[0]) < 12:
        pytest.skip("gcc 12 or later builds the copies")
    assert _detect_ext._lib.detect_has_clones() == 1
