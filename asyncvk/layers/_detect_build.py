"""cffi API-mode build of the detection layers' host loops (``_detect.c``, runs at install time).

``python asyncvk/layers/_detect_build.py`` builds it in place for development.

Needs only a C compiler and the Python headers. ``-ffp-contract=off``: gcc fuses a product and
a sum into one FMA where the target has it (aarch64 by default), which rounds differently from
ncnn's separate float operations; no fast-math either. ``-fno-trapping-math`` lets gcc compute
both sides of a select, so the NMS test over a run of kept boxes becomes a vector loop: each
value is still the IEEE one (only floating-point exception flags, which nothing reads, differ).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from cffi import FFI

CDEF = """
int detect_has_clones(void);
void detect_qsort_order(float *scores, int64_t *order, int64_t n);
int64_t detect_nms(const float *boxes, const float *areas, int64_t n, float threshold,
                   int multiply, int64_t *picked, float *scratch);
void detect_best_class(const float *scores, int64_t classes, int64_t cells, float floor,
                       int64_t *label, float *best);
int64_t detect_yolo_decode(float *blob, int64_t num_box, int64_t classes, int64_t h, int64_t w,
                           const float *anchors, float threshold, int softmax_all, float *out,
                           float *best, int64_t *label, float *gathered, int64_t *kept);
int64_t detect_yolov3_decode(const float *blob, int64_t num_box, int64_t classes, int64_t h,
                             int64_t w, const float *anchors, float threshold, float *out,
                             float *best, int64_t *label);
int64_t detect_ssd_rows(const float *conf, int64_t num_prior, int64_t num_class,
                        int64_t prior_stride, int64_t class_stride, const float *boxes,
                        float threshold, int64_t top_k, float nms_threshold, float *out,
                        int64_t capacity, float *floats, int64_t *ints);
"""


def _builder(module: str = "asyncvk.layers._detect_cffi", clones: bool = True) -> FFI:
    """The extension as ``module``; ``clones=False`` leaves out the AVX2 copies of the hot
    loops (``HOT`` in ``_detect.c``), so a test can hold the baseline's bits against them."""
    ffi = FFI()
    ffi.cdef(CDEF)
    ffi.set_source(
        module,
        Path(__file__).with_name("_detect.c").read_text(),
        libraries=["m"],
        extra_compile_args=["-O2", "-ftree-vectorize", "-fno-trapping-math", "-ffp-contract=off"],
        define_macros=[] if clones else [("ASYNCVK_DETECT_NO_CLONES", "1")],
    )
    return ffi


ffibuilder = _builder()

if __name__ == "__main__":  # a development build, beside this file, from any directory
    # in a temporary directory: there the setuptools that compiles reads no pyproject.toml
    with tempfile.TemporaryDirectory() as tmp:
        built = Path(ffibuilder.compile(tmpdir=tmp, verbose=True))
        shutil.copy(built, Path(__file__).with_name(built.name))
