#version 450
// Running sums along one axis, as ncnn's CumulativeSum: out[o, k, i] = sum of in[o, 0..k, i].
// A blob is (outer, n, inner) around the axis; one invocation walks one line in order, so every
// sum is added in ncnn's sequence (the same float32 result, not a parallel scan's).
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(binding = 0) readonly buffer In { sfp data_in[]; };
layout(binding = 1) writeonly buffer Out { sfp data_out[]; };

layout(push_constant) uniform Params {
    int outer;
    int n;
    int inner;
} p;

#include "index.h"

void main() {
    int line = global_index_1d();
    if (line >= p.outer * p.inner) return;
    int o = line / p.inner;
    int i = line - o * p.inner;
    int at = o * p.n * p.inner + i;
    float sum = 0.0;
    for (int k = 0; k < p.n; k++) {
        sum += float(data_in[at]);
        data_out[at] = sfp(sum);
        at += p.inner;
    }
}
