#version 450
// Softmax along one axis of a blob viewed as (outer, len, inner): each invocation owns one
// (outer, inner) line: max, sum of exp, then normalise. Sizes are push constants.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params { int outer; int len; int inner; } p;

// the max is ncnn's std::max fold from -FLT_MAX (a NaN never becomes it); a NaN still turns
// the whole line NaN through exp and the sum, as in ncnn
#include "std_minmax.h"
#include "index.h"

void main() {
    int i = global_index_1d();
    if (i >= p.outer * p.inner) return;
    int o = i / p.inner;
    int k = i % p.inner;
    int base = o * p.len * p.inner + k;
    float m = -3.402823466e+38;
    for (int j = 0; j < p.len; j++) m = std_max(m, float(x_in[base + j * p.inner]));
    float s = 0.0;
    for (int j = 0; j < p.len; j++) s += exp(float(x_in[base + j * p.inner]) - m);
    for (int j = 0; j < p.len; j++) {
        x_out[base + j * p.inner] = sfp(exp(float(x_in[base + j * p.inner]) - m) / s);
    }
}
