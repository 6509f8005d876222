#version 450
// Embed (asyncvk/layers/embed.py): out[r, j] = weight[k, j] (+ bias[j]) for the token id k of
// input r. asyncvk's blobs hold ids as float values: k is the value truncated toward zero and
// clamped to [0, input_dim - 1] as ncnn clamps its int ids; the clamp is tested in float first
// so that no value (huge, infinite, NaN: 0) reaches an int conversion out of range.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int bias_term = 0;

layout(binding = 0) readonly buffer In { sfp ids[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Weight { sfp weight[]; };
layout(binding = 3) readonly buffer Bias { sfp bias[]; };

layout(push_constant) uniform Params { int n; int num_output; int input_dim; } p;

#include "index.h"

void main() {
    int i = global_index_1d();
    if (i >= p.n) return;
    int r = i / p.num_output;
    int j = i - r * p.num_output;
    float v = float(ids[r]);
    int last = p.input_dim - 1;
    int k = v >= float(last) ? last : (v > 0.0 ? int(v) : 0);
    float e = float(weight[k * p.num_output + j]);
    if (bias_term == 1) e += float(bias[j]);
    x_out[i] = sfp(e);
}
