#version 450
// ncnn's Quantize with one scale: out = float2int8(in * scale), kept as integer-valued floats
// (the input of an int8 layer's float shader).
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params { int n; float scale; } p;

#include "std_minmax.h"
#include "int8.h"
#include "index.h"

void main() {
    int i = global_index_1d();
    if (i >= p.n) return;
    x_out[i] = sfp(float2int8(float(x_in[i]) * p.scale));
}
