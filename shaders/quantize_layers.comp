#version 450
// ncnn's stand-alone Quantize, Dequantize and Requantize (asyncvk/layers/quantize.py), on
// integer blobs kept as integer-valued floats. mode 0: float2int8(x * scale_in[c]);
// 1: x * scale_in[c] + bias[c] (one rounding); 2: float2int8(act(x * scale_in[c] + bias[c]) *
// scale_out[c]). Channel c = i / plane; a step of 0 makes an array shared (one value).
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int mode = 0;
layout(constant_id = 1) const int bias_term = 0;
layout(constant_id = 2) const int act_type = 0;
layout(constant_id = 3) const float act_a = 0.0;
layout(constant_id = 4) const float act_b = 0.0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer ScaleIn { sfp scale_in[]; };
layout(binding = 3) readonly buffer Bias { sfp bias[]; };
layout(binding = 4) readonly buffer ScaleOut { sfp scale_out[]; };

layout(push_constant) uniform Params {
    int n;
    int plane;
    int scale_in_step;
    int bias_step;
    int scale_out_step;
} p;

#include "std_minmax.h"
#include "activation.h"
#include "int8.h"
#include "index.h"

void main() {
    int i = global_index_1d();
    if (i >= p.n) return;
    int c = i / p.plane;
    float x = float(x_in[i]);
    float s = float(scale_in[c * p.scale_in_step]);
    if (mode == 0) {
        x_out[i] = sfp(float2int8(x * s));
        return;
    }
    float v = bias_term == 1 ? int8_fma(x, s, float(bias[c * p.bias_step])) : x * s;
    if (mode == 2) {
        v = activation(v, act_type, act_a, act_b);
        v = float2int8(v * float(scale_out[c * p.scale_out_step]));
    }
    x_out[i] = sfp(v);
}
