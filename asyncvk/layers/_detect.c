/* ncnn's detection post-processing loops on the host: quicksort order, greedy NMS, YOLO decode.
 *
 * Each function mirrors ncnn's loop (src/layer/yolov3detectionoutput.cpp, yolodetectionoutput.cpp,
 * detectionoutput.cpp) in float32 with ncnn's operand order, and calls the C library's expf as
 * ncnn does; built with -ffp-contract=off, so no product and sum are fused. The Python side
 * (layers/_detect_ext.py) checks every size before a call; these functions read and write only
 * inside the extents they are given.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

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

/* ncnn's intersection_area(a, b), a the candidate and b the picked box: std::min(x, y) is
 * (y < x) ? y : x, std::max(x, y) is (x < y) ? y : x. */
static inline float intersection(const float *a, const float *b)
{
    if (a[0] > b[2] || a[2] < b[0] || a[1] > b[3] || a[3] < b[1])
        return 0.f;
    float width = (b[2] < a[2] ? b[2] : a[2]) - (a[0] < b[0] ? b[0] : a[0]);
    float height = (b[3] < a[3] ? b[3] : a[3]) - (a[1] < b[1] ? b[1] : a[1]);
    return width * height;
}

/* ncnn's nms_sorted_bboxes: box i (rows xmin, ymin, xmax, ymax, sorted by score) is kept when
 * no box kept before it overlaps it by more than `threshold`: inter / union > t, or with
 * `multiply` inter > t * union. Writes the kept indexes to `picked`, returns their count. */
int64_t detect_nms(const float *boxes, const float *areas, int64_t n, float threshold,
                   int multiply, int64_t *picked)
{
    int64_t count = 0;
    for (int64_t i = 0; i < n; i++) {
        const float *a = boxes + 4 * i;
        int keep = 1;
        for (int64_t k = 0; k < count && keep; k++) {
            int64_t p = picked[k];
            float inter = intersection(a, boxes + 4 * p);
            float total = areas[i] + areas[p] - inter;
            keep = multiply ? !(inter > threshold * total) : !(inter / total > threshold);
        }
        if (keep)
            picked[count++] = i;
    }
    return count;
}

/* ncnn's scan for a cell's best class: the first score strictly over the running best, which
 * starts at `floor` with class 0 (NaN never wins). `scores` steps `stride` floats a class. */
static inline int64_t best_of(const float *scores, int64_t classes, int64_t stride, float floor,
                              float *best)
{
    int64_t label = 0;
    float value = floor;
    for (int64_t q = 0; q < classes; q++) {
        float s = scores[q * stride];
        if (s > value) {
            label = q;
            value = s;
        }
    }
    *best = value;
    return label;
}

/* best_of for every cell of a (classes, cells) block. */
void detect_best_class(const float *scores, int64_t classes, int64_t cells, float floor,
                       int64_t *label, float *best)
{
    for (int64_t c = 0; c < cells; c++)
        label[c] = best_of(scores + c, classes, cells, floor, best + c);
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

/* ncnn's Softmax over the classes of each cell, in place; the largest is NaN when any is
 * (numpy's max, which the reference used). */
static void softmax_cells(float *scores, int64_t classes, int64_t cells)
{
    for (int64_t c = 0; c < cells; c++) {
        float *s = scores + c;
        float largest = s[0];
        for (int64_t q = 1; q < classes; q++) {
            float v = s[q * cells];
            if (v > largest || v != v)
                largest = v;
        }
        float total = 0.f;
        for (int64_t q = 0; q < classes; q++) {
            float e = expf(s[q * cells] - largest);
            s[q * cells] = e;
            total = q ? total + e : e;
        }
        float scale = 1.f / total;
        for (int64_t q = 0; q < classes; q++)
            s[q * cells] = s[q * cells] * scale;
    }
}

/* One (num_box * (5 + classes), h, w) map of YoloDetectionOutput: softmax over the class
 * logits (in place, ncnn's forward is), confidence sigmoid(objectness) x best class score,
 * and a row in `out` for each cell whose confidence reaches `threshold`, box by box and cells
 * in row-major order. `anchors` holds bias_w / w, bias_h / h per box. Returns the rows. */
int64_t detect_yolo_decode(float *blob, int64_t num_box, int64_t classes, int64_t h, int64_t w,
                           const float *anchors, float threshold, float *out)
{
    int64_t cells = h * w, per_box = 5 + classes;
    float inv_w = 1.f / (float)w, inv_h = 1.f / (float)h;
    float *row = out;
    for (int64_t pp = 0; pp < num_box; pp++) {
        float *map = blob + pp * per_box * cells;
        softmax_cells(map + 5 * cells, classes, cells);
        for (int64_t c = 0; c < cells; c++) {
            float score;
            int64_t label = best_of(map + 5 * cells + c, classes, cells, 0.f, &score);
            float confidence = sigmoid(map[4 * cells + c]) * score;
            if (!(confidence >= threshold))
                continue;
            float cx = ((float)(c % w) + sigmoid(map[c])) * inv_w;
            float cy = ((float)(c / w) + sigmoid(map[cells + c])) * inv_h;
            float box_w = expf(map[2 * cells + c]) * anchors[2 * pp];
            float box_h = expf(map[3 * cells + c]) * anchors[2 * pp + 1];
            row = put_box(row, confidence, cx, cy, box_w, box_h, label, 1);
        }
    }
    return (row - out) / 7;
}

/* One map of Yolov3DetectionOutput: confidence 1 / (1 + e^-obj (1 + e^-best)) as ncnn
 * computes it, rows as detect_yolo_decode's; `anchors` holds bias_w / net_w, bias_h / net_h. */
int64_t detect_yolov3_decode(const float *blob, int64_t num_box, int64_t classes, int64_t h,
                             int64_t w, const float *anchors, float threshold, float *out)
{
    int64_t cells = h * w, per_box = 5 + classes;
    float inv_w = 1.f / (float)w, inv_h = 1.f / (float)h;
    float *row = out;
    for (int64_t pp = 0; pp < num_box; pp++) {
        const float *map = blob + pp * per_box * cells;
        for (int64_t c = 0; c < cells; c++) {
            float score;
            int64_t label = best_of(map + 5 * cells + c, classes, cells, -FLT_MAX, &score);
            float confidence = 1.f / (1.f + expf(-map[4 * cells + c]) * (1.f + expf(-score)));
            if (!(confidence >= threshold))
                continue;
            float cx = ((float)(c % w) + sigmoid(map[c])) * inv_w;
            float cy = ((float)(c / w) + sigmoid(map[cells + c])) * inv_h;
            float box_w = expf(map[2 * cells + c]) * anchors[2 * pp];
            float box_h = expf(map[3 * cells + c]) * anchors[2 * pp + 1];
            row = put_box(row, confidence, cx, cy, box_w, box_h, label, 0);
        }
    }
    return (row - out) / 7;
}
