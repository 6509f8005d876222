#version 450
// The start of a recurrent layer's state (asyncvk/layers/recurrent.py): the initial state input
// widened to float32, or zeros where the layer has none.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(binding = 0) readonly buffer Src { sfp src[]; };
layout(binding = 1) writeonly buffer Dst { float dst[]; };

layout(push_constant) uniform Params { int n; int has_src; } p;

#include "index.h"

void main() {
    int i = global_index_1d();
    if (i >= p.n) return;
    dst[i] = p.has_src == 1 ? float(src[i]) : 0.0;
}
