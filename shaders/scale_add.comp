#version 450
// out[i] = in[i] * alpha + p.bias + offset, over p.n elements.
// A tiny shader that exercises specialization constants, push constants, the local size and the
// fp16 storage variant; tests and benchmarks use it.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const float alpha = 1.0;
layout(constant_id = 1) const int offset = 0;

layout(binding = 0) readonly buffer In { sfp data_in[]; };
layout(binding = 1) writeonly buffer Out { sfp data_out[]; };

layout(push_constant) uniform Params {
    int n;
    float bias;
} p;

#include "index.h"

void main() {
    int i = global_index_1d();
    if (i >= p.n) return;
    afp v = afp(data_in[i]) * afp(alpha) + afp(p.bias) + afp(offset);
    data_out[i] = sfp(v);
}
