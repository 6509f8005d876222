#version 450
// Copy a blob in the storage type into float32 values: how a plan with fp16 storage hands its
// outputs to the host, converted on the GPU (numpy converts float16 at about 1.7 ns an element
// on the host, 30 times a copy's time).
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { float x_out[]; };

layout(push_constant) uniform Params { int n; } p;

#include "index.h"

void main() {
    int i = global_index_1d();
    if (i >= p.n) return;
    x_out[i] = float(x_in[i]);
}
