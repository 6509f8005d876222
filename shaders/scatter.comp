#version 450
// out[index[i]] = in[i] for i < n: one input of a Concat placed into its part of the output.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Index { int index[]; };

layout(push_constant) uniform Params { int n; } p;

#include "index.h"

void main() {
    int i = global_index_1d();
    if (i >= p.n) return;
    x_out[index[i]] = x_in[i];
}
