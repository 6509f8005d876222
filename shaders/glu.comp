#version 450
// ncnn's GLU: a blob is (outer, n, inner) around the split axis; out[o, k, i] = a * sigmoid(b)
// with a = in[o, k, i], b = in[o, k + half, i] (half = n / 2: an odd n leaves its last line
// out, as ncnn's offsets do). The sigmoid is ncnn's unclamped 1 / (1 + exp(-b)).
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(binding = 0) readonly buffer In { sfp data_in[]; };
layout(binding = 1) writeonly buffer Out { sfp data_out[]; };

layout(push_constant) uniform Params {
    int count;  // outer * half * inner outputs
    int half_n;
    int inner;
    int n;
} p;

#include "index.h"

void main() {
    int i = global_index_1d();
    if (i >= p.count) return;
    int block = p.half_n * p.inner;
    int o = i / block;
    int at = o * p.n * p.inner + (i - o * block);
    float a = float(data_in[at]);
    float b = float(data_in[at + block]);
    data_out[i] = sfp(a * (1.0 / (1.0 + exp(-b))));
}
