#version 450
// Direct convolution, any kernel / stride / dilation / padding / groups, with bias and fused
// activation. One invocation computes one output value; x, y = output column and row,
// z = output channel. Weights are [out_c][in_c / group][kernel_h][kernel_w] (ncnn's order).
// Pads travel in push constants because SAME padding depends on the input size.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int kernel_w = 1;
layout(constant_id = 1) const int kernel_h = 1;
layout(constant_id = 2) const int dilation_w = 1;
layout(constant_id = 3) const int dilation_h = 1;
layout(constant_id = 4) const int stride_w = 1;
layout(constant_id = 5) const int stride_h = 1;
layout(constant_id = 6) const int group = 1;
layout(constant_id = 7) const int bias_term = 0;
layout(constant_id = 8) const int act_type = 0;
layout(constant_id = 9) const float act_a = 0.0;
layout(constant_id = 10) const float act_b = 0.0;
layout(constant_id = 11) const float pad_value = 0.0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Weight { sfp weight[]; };
layout(binding = 3) readonly buffer Bias { sfp bias[]; };

layout(push_constant) uniform Params {
    int w; int h; int c;
    int outw; int outh; int outc;
    int pad_left; int pad_top;
} p;

#include "std_minmax.h"
#include "index.h"
#include "activation.h"

void invoke(int ox, int oy, int oc) {
    if (ox >= p.outw || oy >= p.outh || oc >= p.outc) return;

    int in_per_group = p.c / group;
    int out_per_group = p.outc / group;
    int g = oc / out_per_group;
    int maxk = kernel_w * kernel_h;
    float sum = bias_term == 1 ? float(bias[oc]) : 0.0;
    int x0 = ox * stride_w - p.pad_left;
    int y0 = oy * stride_h - p.pad_top;
    int wbase = oc * in_per_group * maxk;
    for (int ic = 0; ic < in_per_group; ic++) {
        int cin = g * in_per_group + ic;
        int plane = cin * p.w * p.h;
        int wrow = wbase + ic * maxk;
        for (int ky = 0; ky < kernel_h; ky++) {
            int y = y0 + ky * dilation_h;
            bool yin = y >= 0 && y < p.h;
            for (int kx = 0; kx < kernel_w; kx++) {
                int x = x0 + kx * dilation_w;
                float v = (yin && x >= 0 && x < p.w) ? float(x_in[plane + y * p.w + x]) : pad_value;
                sum += v * float(weight[wrow + ky * kernel_w + kx]);
            }
        }
    }
    x_out[(oc * p.outh + oy) * p.outw + ox] = sfp(activation(sum, act_type, act_a, act_b));
}

void main() {
    ivec3 id = ivec3(gl_GlobalInvocationID);
    ivec3 stride = grid_stride();
    for (int z = id.z; z < p.outc; z += stride.z)
        for (int y = id.y; y < p.outh; y += stride.y)
            for (int x = id.x; x < p.outw; x += stride.x) invoke(x, y, z);
}
