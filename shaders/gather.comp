#version 450
// out[i] = index[i] >= 0 ? in[index[i]] : fill. The index map is computed once per plan from
// the layer's own CPU reference, so every pure data-movement layer (Crop, Slice, Permute,
// PixelShuffle, ShuffleChannel, Padding) shares this one pipeline and its exact semantics.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Index { int index[]; };

layout(push_constant) uniform Params { int n; float fill; } p;

#include "index.h"

void main() {
    int i = global_index_1d();
    if (i >= p.n) return;
    int j = index[i];
    x_out[i] = j >= 0 ? x_in[j] : sfp(p.fill);
}
