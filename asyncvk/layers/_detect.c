/* ncnn's detection post-processing loops on the host: quicksort order, greedy NMS, YOLO decode.
 *
 * Each function mirrors ncnn's loop (src/layer/yolov3detectionoutput.cpp, yolodetectionoutput.cpp,
 * detectionoutput.cpp) in float32 with ncnn's operand order, and calls the C library's expf as
 * ncnn does (YoloDetectionOutput's softmax excepted, see exp_nonpositive); built with
 * -ffp-contract=off, so no product and sum are fused. The Python side
 * (layers/_detect_ext.py) checks every size before a call; these functions read and write only
 * inside the extents they are given.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

/* The loops below vectorize; x86-64's baseline (SSE2) gives them 4 floats a step. HOT builds
 * an AVX2 copy beside it, picked once at load by the CPU (an ifunc; no flag of the build
 * machine decides). Results are the same bits: -ffp-contract=off keeps FMA out, and
 * add, multiply, divide and compare are IEEE-exact at either width. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12 && \
    defined(__GLIBC__) && !defined(ASYNCVK_DETECT_NO_CLONES)
/* gcc 12 named arch=x86-64-v3 in target_clones; the ifunc that picks a copy needs glibc (musl
 * has none) */
#define HOT __attribute__((target_clones("arch=x86-64-v3", "default")))
#define HAS_CLONES 1
#else
#define HOT
#define HAS_CLONES 0
#endif

/* Whether this build carries the AVX2 copies (a test compares them with the baseline). */
int detect_has_clones(void)
{
    return HAS_CLONES;
}

/* The permutation ncnn's qsort_descent_inplace leaves `scores` in (sorted in place too). Its
 * two halves are disjoint, so they may be sorted in any order: the larger waits on a stack,
 * the smaller is sorted next, so the stack holds at most log2(n) ranges. */
void detect_qsort_order(float *scores, int64_t *order, int64_t n)
{
    int64_t stack[2 * 64];
    int64_t depth = 0;
    int64_t left = 0, right = n - 1;
    for (int64_t k = 0; k < n; k++)
        order[k] = k;
    if (n < 2)
        return;
    for (;;) {
        int64_t i = left, j = right;
        float p = scores[left + (right - left) / 2];
        while (i <= j) {
            /* i and j never leave [left, right] (an element not past the pivot stops each
             * scan); the bounds only make that hold by construction */
            while (i <= right && scores[i] > p)
                i++;
            while (j >= left && scores[j] < p)
                j--;
            if (i <= j) {
                float s = scores[i];
                int64_t o = order[i];
                scores[i] = scores[j];
                scores[j] = s;
                order[i] = order[j];
                order[j] = o;
                i++;
                j--;
            }
        }
        int low = left < j, high = i < right;
        if (low && high) {
            if (j - left < right - i) {
                stack[depth++] = i, stack[depth++] = right;
                right = j;
            } else {
                stack[depth++] = left, stack[depth++] = j;
                left = i;
            }
        } else if (low) {
            right = j;
        } else if (high) {
            left = i;
        } else if (depth) {
            right = stack[--depth];
            left = stack[--depth];
        } else {
            return;
        }
    }
}

/* The kept boxes as columns, so the test against a run of them is one vector loop. */
struct kept {
    float *xmin, *ymin, *xmax, *ymax, *area;
};

/* The overlap of box `a` (area `area`) with kept box p, as ncnn computes it: intersection_area
 * (a the candidate; std::min(x, y) is (y < x) ? y : x, std::max(x, y) is (x < y) ? y : x) and
 * union = area + area[p] - inter. Without branches, so the loops below are vector loops. */
#define OVERLAP(k, p, a, area)                                                                 \
    int apart = (a[0] > k->xmax[p]) | (a[2] < k->xmin[p]) | (a[1] > k->ymax[p]) |           \
                (a[3] < k->ymin[p]);                                                         \
    float width = (k->xmax[p] < a[2] ? k->xmax[p] : a[2]) -                                  \
                  (a[0] < k->xmin[p] ? k->xmin[p] : a[0]);                                   \
    float height = (k->ymax[p] < a[3] ? k->ymax[p] : a[3]) -                                 \
                   (a[1] < k->ymin[p] ? k->ymin[p] : a[1]);                                  \
    float inter = apart ? 0.f : width * height;                                              \
    float total = area + k->area[p] - inter;

/* Whether any of kept boxes [from, to) suppresses box `a`: inter / union > t, or with
 * `multiply` inter > t * union (a pair's result does not depend on how pairs are batched). */
static int suppressed(const struct kept *k, int64_t from, int64_t to, const float *a, float area,
                      float threshold, int multiply)
{
    int hit = 0;
    if (multiply) {
        for (int64_t p = from; p < to; p++) {
            OVERLAP(k, p, a, area)
            hit |= inter > threshold * total;
        }
    } else {
        for (int64_t p = from; p < to; p++) {
            OVERLAP(k, p, a, area)
            hit |= inter / total > threshold;
        }
    }
    return hit;
}

/* Kept boxes compared at once before the loop may stop at a suppressing one. */
#define RUN 32

/* ncnn's nms_sorted_bboxes: box i (rows xmin, ymin, xmax, ymax, sorted by score) is kept when
 * no box kept before it overlaps it by more than `threshold`: inter / union > t, or with
 * `multiply` inter > t * union. Writes the kept indexes to `picked`, returns their count;
 * `scratch` holds 5 n floats (the kept boxes as columns). */
HOT
int64_t detect_nms(const float *boxes, const float *areas, int64_t n, float threshold,
                   int multiply, int64_t *picked, float *scratch)
{
    struct kept k = {scratch, scratch + n, scratch + 2 * n, scratch + 3 * n, scratch + 4 * n};
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *a = boxes + 4 * i;
        int hit = 0;
        for (int64_t from = 0; from < count && !hit; from += RUN) {
            int64_t to = from + RUN < count ? from + RUN : count;
            hit = suppressed(&k, from, to, a, areas[i], threshold, multiply);
        }
        if (hit)
            continue;
        k.xmin[count] = a[0];
        k.ymin[count] = a[1];
        k.xmax[count] = a[2];
        k.ymax[count] = a[3];
        k.area[count] = areas[i];
        picked[count++] = i;
    }
    return count;
}

/* ncnn's scan for each cell's best class in a (classes, cells) block: the first score strictly
 * over the running best, which starts at `floor` with class 0 (NaN never wins). Each cell
 * visits the classes in ncnn's order; the cells go side by side (contiguous rows). */
HOT
void detect_best_class(const float *scores, int64_t classes, int64_t cells, float floor,
                       int64_t *label, float *best)
{
    for (int64_t c = 0; c < cells; c++) {
        label[c] = 0;
        best[c] = floor;
    }
    for (int64_t q = 0; q < classes; q++) {
        const float *s = scores + q * cells;
        for (int64_t c = 0; c < cells; c++) {
            int win = s[c] > best[c];
            best[c] = win ? s[c] : best[c];
            label[c] = win ? q : label[c];
        }
    }
}

static inline float sigmoid(float x)
{
    return 1.f / (1.f + expf(-x));
}

/* One candidate row: score, xmin, ymin, xmax, ymax, area, label. */
static inline float *put_box(float *row, float score, float cx, float cy, float box_w,
                             float box_h, int64_t label, int corner_area)
{
    float half_w = box_w * 0.5f, half_h = box_h * 0.5f;
    row[0] = score;
    row[1] = cx - half_w;
    row[2] = cy - half_h;
    row[3] = cx + half_w;
    row[4] = cy + half_h;
    row[5] = corner_area ? (row[3] - row[1]) * (row[4] - row[2]) : box_w * box_h;
    row[6] = (float)label;
    return row + 7;
}

/* The box of cell c of one YOLO map (x, y, w, h logits as planes of `cells` floats, `anchor`
 * its box's w, h scale) as a candidate row: both decodes share it. */
static inline float *put_cell(float *row, const float *map, int64_t cells, int64_t c, int64_t w,
                              float inv_w, float inv_h, const float *anchor, float confidence,
                              int64_t label, int corner_area)
{
    float cx = ((float)(c % w) + sigmoid(map[c])) * inv_w;
    float cy = ((float)(c / w) + sigmoid(map[cells + c])) * inv_h;
    float box_w = expf(map[2 * cells + c]) * anchor[0];
    float box_h = expf(map[3 * cells + c]) * anchor[1];
    return put_box(row, confidence, cx, cy, box_w, box_h, label, corner_area);
}

/* e^x for x <= 0 or NaN: Cephes' expf polynomial in plain float arithmetic, which gcc
 * vectorizes where it cannot vectorize calls to expf; within 2 ulps of expf, and 0 below
 * logf(FLT_MIN), where expf is subnormal. YoloDetectionOutput's softmax takes it: with a call
 * to expf per class and cell, a 26 x 26 map of 5 boxes and 20 classes decoded in 0.285 ms, now
 * 0.211 ms (development machine). ncnn's own x86 softmax runs a vector polynomial too, so its
 * results were never libm's. */
static inline float exp_nonpositive(float x)
{
    const float lo = -87.33654f;
    float t = x < lo ? lo : x; /* NaN stays NaN */
    float n = (t * 1.44269504088896341f + 12582912.f) - 12582912.f; /* rint(t / ln 2) */
    float r = (t - n * 0.693359375f) - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = (p * (r * r) + r) + 1.f;
    union { int32_t i; float f; } scale; /* 2^n, n in [-126, 0] */
    scale.i = ((int32_t)(n == n ? n : 0.f) + 127) << 23;
    return x < lo ? 0.f : p * scale.f;
}

/* ncnn's Softmax over the classes of each cell, in place (`total` holds a float per cell);
 * the largest is NaN when any score is (numpy's max, which the reference used). */
static void softmax_cells(float *scores, int64_t classes, int64_t cells, float *total)
{
    float *largest = total;
    for (int64_t c = 0; c < cells; c++)
        largest[c] = scores[c];
    for (int64_t q = 1; q < classes; q++) {
        const float *s = scores + q * cells;
        for (int64_t c = 0; c < cells; c++)
            largest[c] = s[c] > largest[c] || s[c] != s[c] ? s[c] : largest[c];
    }
    for (int64_t q = 0; q < classes; q++) {
        float *s = scores + q * cells;
        for (int64_t c = 0; c < cells; c++)
            s[c] = exp_nonpositive(s[c] - largest[c]);
    }
    for (int64_t q = 1; q < classes; q++) {  /* the sum in ncnn's order, from class 0 */
        const float *s = scores + q * cells;
        for (int64_t c = 0; c < cells; c++)
            total[c] = (q == 1 ? scores[c] : total[c]) + s[c];
    }
    if (classes == 1)
        for (int64_t c = 0; c < cells; c++)
            total[c] = scores[c];
    for (int64_t c = 0; c < cells; c++)
        total[c] = 1.f / total[c];
    for (int64_t q = 0; q < classes; q++) {
        float *s = scores + q * cells;
        for (int64_t c = 0; c < cells; c++)
            s[c] = s[c] * total[c];
    }
}

/* One (num_box * (5 + classes), h, w) map of YoloDetectionOutput: softmax over the class
 * logits, confidence sigmoid(objectness) x best class score, and a row in `out` for each cell
 * whose confidence reaches `threshold`, box by box and cells in row-major order. `anchors`
 * holds bias_w / w, bias_h / h per box; `best`, `label` and `kept` hold h w values each,
 * `gathered` classes h w. Returns the rows.
 *
 * With `softmax_all`, every cell's class logits are softmaxed in place, as ncnn's forward does
 * (the layer's output when nothing is detected). Without it, only the cells whose
 * sigmoid(objectness) reaches `threshold` are, in `gathered`, and `blob` is left as it was:
 * the best class score is at most 1 (the best logit's e^0 is 1, over a sum of at least 1), so
 * no other cell can reach the threshold. Each cell's arithmetic is the same either way, so the
 * rows are too. Most cells of a trained model's map fall short: there the softmax was 85-95% of
 * the decode. */
HOT
int64_t detect_yolo_decode(float *blob, int64_t num_box, int64_t classes, int64_t h, int64_t w,
                           const float *anchors, float threshold, int softmax_all, float *out,
                           float *best, int64_t *label, float *gathered, int64_t *kept)
{
    int64_t cells = h * w, per_box = 5 + classes;
    float inv_w = 1.f / (float)w, inv_h = 1.f / (float)h;
    float *row = out;
    for (int64_t pp = 0; pp < num_box; pp++) {
        float *map = blob + pp * per_box * cells;
        const float *objectness = map + 4 * cells;
        int64_t n = 0;
        if (softmax_all) {
            softmax_cells(map + 5 * cells, classes, cells, best);
            detect_best_class(map + 5 * cells, classes, cells, 0.f, label, best);
            for (int64_t c = 0; c < cells; c++)
                kept[n++] = c;
        } else {
            for (int64_t c = 0; c < cells; c++)
                if (sigmoid(objectness[c]) >= threshold)
                    kept[n++] = c;
            for (int64_t q = 0; q < classes; q++) {
                const float *s = map + (5 + q) * cells;
                float *g = gathered + q * n;
                for (int64_t k = 0; k < n; k++)
                    g[k] = s[kept[k]];
            }
            softmax_cells(gathered, classes, n, best);
            detect_best_class(gathered, classes, n, 0.f, label, best);
        }
        for (int64_t k = 0; k < n; k++) {
            int64_t c = kept[k];
            float confidence = sigmoid(objectness[c]) * best[k];
            if (!(confidence >= threshold))
                continue;
            row = put_cell(row, map, cells, c, w, inv_w, inv_h, anchors + 2 * pp, confidence,
                           label[k], 1);
        }
    }
    return (row - out) / 7;
}

/* One map of Yolov3DetectionOutput: confidence 1 / (1 + e^-obj (1 + e^-best)) as ncnn
 * computes it, rows and arguments as detect_yolo_decode's; `anchors` holds bias_w / net_w,
 * bias_h / net_h. */
HOT
int64_t detect_yolov3_decode(const float *blob, int64_t num_box, int64_t classes, int64_t h,
                             int64_t w, const float *anchors, float threshold, float *out,
                             float *best, int64_t *label)
{
    int64_t cells = h * w, per_box = 5 + classes;
    float inv_w = 1.f / (float)w, inv_h = 1.f / (float)h;
    float *row = out;
    for (int64_t pp = 0; pp < num_box; pp++) {
        const float *map = blob + pp * per_box * cells;
        detect_best_class(map + 5 * cells, classes, cells, -FLT_MAX, label, best);
        for (int64_t c = 0; c < cells; c++) {
            float confidence = 1.f / (1.f + expf(-map[4 * cells + c]) * (1.f + expf(-best[c])));
            if (!(confidence >= threshold))
                continue;
            row = put_cell(row, map, cells, c, w, inv_w, inv_h, anchors + 2 * pp, confidence,
                           label[c], 0);
        }
    }
    return (row - out) / 7;
}

/* DetectionOutput's per-class work (ncnn's loop over classes 1..num_class-1): the priors whose
 * score is over `threshold`, in prior order, sorted by ncnn's quicksort and cut to `top_k`,
 * then NMS (area = width x height, inter / union > nms_threshold). Class l's score of prior p
 * is conf[p * prior_stride + l * class_stride]. Writes rows [label, score, xmin, ymin, xmax,
 * ymax] class by class to `out` (room for `capacity` rows, (num_class - 1) min(top_k, num_prior)
 * is enough) and returns their count, or -1 when they do not fit. `floats` holds 11 num_prior
 * floats, `ints` 3 num_prior int64s. */
HOT
int64_t detect_ssd_rows(const float *conf, int64_t num_prior, int64_t num_class,
                        int64_t prior_stride, int64_t class_stride, const float *boxes,
                        float threshold, int64_t top_k, float nms_threshold, float *out,
                        int64_t capacity, float *floats, int64_t *ints)
{
    float *score = floats, *sorted = floats + num_prior, *area = floats + 5 * num_prior;
    float *kept = floats + 6 * num_prior;
    int64_t *passed = ints, *order = ints + num_prior, *picked = ints + 2 * num_prior;
    float *row = out;
    for (int64_t label = 1; label < num_class; label++) {
        int64_t n = 0;
        for (int64_t p = 0; p < num_prior; p++) {
            float s = conf[p * prior_stride + label * class_stride];
            if (s > threshold) {
                passed[n] = p;
                score[n++] = s;
            }
        }
        detect_qsort_order(score, order, n);
        int64_t m = n < top_k ? n : top_k;
        for (int64_t k = 0; k < m; k++) {
            const float *b = boxes + 4 * passed[order[k]];
            float *d = sorted + 4 * k;
            d[0] = b[0], d[1] = b[1], d[2] = b[2], d[3] = b[3];
            area[k] = (d[2] - d[0]) * (d[3] - d[1]);
        }
        int64_t count = detect_nms(sorted, area, m, nms_threshold, 0, picked, kept);
        if (count > capacity - (row - out) / 6)
            return -1;
        for (int64_t k = 0; k < count; k++) {
            int64_t p = passed[order[picked[k]]];
            const float *b = boxes + 4 * p;
            row[0] = (float)label;
            row[1] = conf[p * prior_stride + label * class_stride];
            row[2] = b[0], row[3] = b[1], row[4] = b[2], row[5] = b[3];
            row += 6;
        }
    }
    return (row - out) / 6;
}
