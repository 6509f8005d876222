#version 450
// Convolution3D / ConvolutionDepthWise3D: direct 3-D convolution, any kernel / stride /
// dilation / padding / groups, with bias and fused activation. One invocation computes one
// output value of the flat (c, d, h, w) output, summing in ncnn's order (bias, then input
// channel, then kernel depth, row, column). Weights are [out_c][in_c / group][kd][kh][kw].
// Leading pads travel in push constants because SAME padding depends on the input size.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int kernel_w = 1;
layout(constant_id = 1) const int kernel_h = 1;
layout(constant_id = 2) const int kernel_d = 1;
layout(constant_id = 3) const int dilation_w = 1;
layout(constant_id = 4) const int dilation_h = 1;
layout(constant_id = 5) const int dilation_d = 1;
layout(constant_id = 6) const int stride_w = 1;
layout(constant_id = 7) const int stride_h = 1;
layout(constant_id = 8) const int stride_d = 1;
layout(constant_id = 9) const int group = 1;
layout(constant_id = 10) const int bias_term = 0;
layout(constant_id = 11) const int act_type = 0;
layout(constant_id = 12) const float act_a = 0.0;
layout(constant_id = 13) const float act_b = 0.0;
layout(constant_id = 14) const float pad_value = 0.0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Weight { sfp weight[]; };
layout(binding = 3) readonly buffer Bias { sfp bias[]; };

layout(push_constant) uniform Params {
    int w; int h; int d; int c;
    int outw; int outh; int outd; int outc;
    int pad_left; int pad_top; int pad_front;
} p;

#include "std_minmax.h"
#include "index.h"
#include "activation.h"

void main() {
    int i = global_index_1d();
    int plane = p.outw * p.outh;
    int volume = plane * p.outd;
    if (i >= volume * p.outc) return;
    int oc = i / volume;
    int oz = (i % volume) / plane;
    int oy = (i % plane) / p.outw;
    int ox = i % p.outw;

    int in_per_group = p.c / group;
    int g = oc / (p.outc / group);
    int maxk = kernel_w * kernel_h * kernel_d;
    int x0 = ox * stride_w - p.pad_left;
    int y0 = oy * stride_h - p.pad_top;
    int z0 = oz * stride_d - p.pad_front;
    float sum = bias_term == 1 ? float(bias[oc]) : 0.0;
    int k = oc * in_per_group * maxk;
    for (int ic = 0; ic < in_per_group; ic++) {
        int channel = (g * in_per_group + ic) * p.d;
        for (int kz = 0; kz < kernel_d; kz++) {
            int z = z0 + kz * dilation_d;
            bool zin = z >= 0 && z < p.d;
            for (int ky = 0; ky < kernel_h; ky++) {
                int y = y0 + ky * dilation_h;
                bool yin = zin && y >= 0 && y < p.h;
                int row = ((channel + z) * p.h + y) * p.w;
                for (int kx = 0; kx < kernel_w; kx++, k++) {
                    int x = x0 + kx * dilation_w;
                    float v = (yin && x >= 0 && x < p.w) ? float(x_in[row + x]) : pad_value;
                    sum += v * float(weight[k]);
                }
            }
        }
    }
    x_out[i] = sfp(activation(sum, act_type, act_a, act_b));
}
