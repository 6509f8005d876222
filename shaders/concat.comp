#version 450
// Concat of up to eight inputs in one dispatch. The output is viewed as rows of row_len values
// (row = everything before the concat axis); input k owns columns [col[k], col[k + 1]) of every
// row. One invocation per output value finds its input and copies one value; unused input
// bindings are bound to input 0 and never read.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(binding = 0) readonly buffer In0 { sfp in0[]; };
layout(binding = 1) readonly buffer In1 { sfp in1[]; };
layout(binding = 2) readonly buffer In2 { sfp in2[]; };
layout(binding = 3) readonly buffer In3 { sfp in3[]; };
layout(binding = 4) readonly buffer In4 { sfp in4[]; };
layout(binding = 5) readonly buffer In5 { sfp in5[]; };
layout(binding = 6) readonly buffer In6 { sfp in6[]; };
layout(binding = 7) readonly buffer In7 { sfp in7[]; };
layout(binding = 8) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params {
    int rows;
    int row_len;
    int count;
    int col[9];
} p;

#include "index.h"

void main() {
    int i = global_index_1d();
    if (i >= p.rows * p.row_len) return;
    int row = i / p.row_len;
    int c = i % p.row_len;
    int k = 0;
    while (k + 1 < p.count && c >= p.col[k + 1]) k++;
    int width = p.col[k + 1] - p.col[k];
    int src = row * width + (c - p.col[k]);
    sfp v;
    if (k == 0) v = in0[src];
    else if (k == 1) v = in1[src];
    else if (k == 2) v = in2[src];
    else if (k == 3) v = in3[src];
    else if (k == 4) v = in4[src];
    else if (k == 5) v = in5[src];
    else if (k == 6) v = in6[src];
    else v = in7[src];
    x_out[i] = v;
}
