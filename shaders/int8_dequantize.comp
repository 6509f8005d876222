#version 450
// The epilogue of an int8 layer, in place on its integer sums: v = act(sum * scale_in[c] +
// bias[c]); with requantize, v = float2int8(v * scale_out) / scale_out (ncnn keeps the int8
// value; asyncvk keeps it dequantized, 0 when scale_out is 0). Channel c = i / plane.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int bias_term = 0;
layout(constant_id = 1) const int act_type = 0;
layout(constant_id = 2) const float act_a = 0.0;
layout(constant_id = 3) const float act_b = 0.0;
layout(constant_id = 4) const int requantize = 0;

layout(binding = 0) buffer Data { sfp data[]; };
layout(binding = 1) readonly buffer ScaleIn { sfp scale_in[]; };
layout(binding = 2) readonly buffer Bias { sfp bias[]; };

layout(push_constant) uniform Params { int n; int plane; float scale_out; } p;

#include "std_minmax.h"
#include "activation.h"
#include "int8.h"
#include "index.h"

void main() {
    int i = global_index_1d();
    if (i >= p.n) return;
    int c = i / p.plane;
    float v = int8_fma(float(data[i]), float(scale_in[c]), bias_term == 1 ? float(bias[c]) : 0.0);
    v = activation(v, act_type, act_a, act_b);
    if (requantize == 1) v = p.scale_out == 0.0 ? 0.0 : float2int8(v * p.scale_out) / p.scale_out;
    data[i] = sfp(v);
}
