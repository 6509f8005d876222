#version 450
// Copy float32 values into a blob in the storage type (fp32, or fp16 with fp16 storage): how a
// layer whose output depends only on shapes (PriorBox) fills its blob from a table the host
// computed once per plan.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(binding = 0) readonly buffer In { float x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params { int n; } p;

#include "index.h"

void main() {
    int i = global_index_1d();
    if (i >= p.n) return;
    x_out[i] = sfp(x_in[i]);
}
