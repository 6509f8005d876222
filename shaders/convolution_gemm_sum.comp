#version 450
// The second pass of a split convolution_gemm.comp: each output is the sum of its splits'
// fp32 partial sums (in split order), plus the bias, through the activation.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int bias_term = 0;
layout(constant_id = 1) const int act_type = 0;
layout(constant_id = 2) const float act_a = 0.0;
layout(constant_id = 3) const float act_b = 0.0;

layout(binding = 0) readonly buffer Partial { float partial[]; };  // [split][outc][pixels]
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Bias { sfp bias[]; };

layout(push_constant) uniform Params {
    int outc; int pixels; int splits;
} p;

#include "std_minmax.h"
#include "activation.h"

void main() {
    int size = p.outc * p.pixels;
    int stride = int(gl_NumWorkGroups.x * gl_WorkGroupSize.x);
    for (int i = int(gl_GlobalInvocationID.x); i < size; i += stride) {
        float sum = 0.0;
        for (int z = 0; z < p.splits; z++) sum += partial[z * size + i];
        float bv = bias_term == 1 ? float(bias[i / p.pixels]) : 0.0;
        x_out[i] = sfp(activation(sum + bv, act_type, act_a, act_b));
    }
}
