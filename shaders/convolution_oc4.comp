#version 450
// Direct convolution computing a 4 x 4 tile per invocation: four consecutive output channels at
// four consecutive output columns, so each input value feeds four channels and each weight four
// columns (a quarter of the loads of convolution.comp per multiply-add). Used when the four
// channels share a group (group == 1, or out_c / group a multiple of 4); same specialization
// constants, weight order and push constants as convolution.comp.
// x = output column / 4, y = output row, z = output channel / 4.
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

#include "activation.h"

void main() {
    int ox0 = int(gl_GlobalInvocationID.x) * 4;
    int oy = int(gl_GlobalInvocationID.y);
    int oc0 = int(gl_GlobalInvocationID.z) * 4;
    if (ox0 >= p.outw || oy >= p.outh || oc0 >= p.outc) return;

    int in_per_group = p.c / group;
    int out_per_group = p.outc / group;
    int g = oc0 / out_per_group;
    int maxk = kernel_w * kernel_h;
    int wstride = in_per_group * maxk;
    // a partial block reads valid rows/columns; what it computes past the edge is not stored
    ivec4 oc = min(ivec4(oc0) + ivec4(0, 1, 2, 3), ivec4(p.outc - 1));
    vec4 b = bias_term == 1
        ? vec4(float(bias[oc.x]), float(bias[oc.y]), float(bias[oc.z]), float(bias[oc.w]))
        : vec4(0.0);
    vec4 s0 = b, s1 = b, s2 = b, s3 = b;  // one vec4 of channels per output column
    int y0 = oy * stride_h - p.pad_top;
    ivec4 xs = (ivec4(ox0) + ivec4(0, 1, 2, 3)) * stride_w - p.pad_left;
    ivec4 wrow = oc * wstride;
    for (int ic = 0; ic < in_per_group; ic++) {
        int plane = (g * in_per_group + ic) * p.w * p.h;
        int kbase = ic * maxk;
        for (int ky = 0; ky < kernel_h; ky++) {
            int y = y0 + ky * dilation_h;
            bool yin = y >= 0 && y < p.h;
            int row = plane + y * p.w;
            for (int kx = 0; kx < kernel_w; kx++) {
                ivec4 x = xs + kx * dilation_w;
                bvec4 ok = bvec4(yin && x.x >= 0 && x.x < p.w, yin && x.y >= 0 && x.y < p.w,
                                 yin && x.z >= 0 && x.z < p.w, yin && x.w >= 0 && x.w < p.w);
                float v0 = ok.x ? float(x_in[row + x.x]) : pad_value;
                float v1 = ok.y ? float(x_in[row + x.y]) : pad_value;
                float v2 = ok.z ? float(x_in[row + x.z]) : pad_value;
                float v3 = ok.w ? float(x_in[row + x.w]) : pad_value;
                int k = kbase + ky * kernel_w + kx;
                vec4 wv = vec4(float(weight[wrow.x + k]), float(weight[wrow.y + k]),
                               float(weight[wrow.z + k]), float(weight[wrow.w + k]));
                s0 += v0 * wv;
                s1 += v1 * wv;
                s2 += v2 * wv;
                s3 += v3 * wv;
            }
        }
    }
    int plane_out = p.outh * p.outw;
    int base = (oc0 * p.outh + oy) * p.outw;
    mat4 sums = mat4(s0, s1, s2, s3);  // column = output column, row = channel
    for (int j = 0; j < 4; j++) {
        int ox = ox0 + j;
        if (ox >= p.outw) break;
        for (int i = 0; i < 4; i++) {
            if (oc0 + i >= p.outc) break;
            x_out[base + i * plane_out + ox] = sfp(activation(sums[j][i], act_type, act_a, act_b));
        }
    }
}
