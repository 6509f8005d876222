#version 450
// Transposed convolution (Deconvolution / DeconvolutionDepthWise) as a gather: each output
// value sums the input taps that scatter onto it. Output is the full deconvolution, already
// cropped by pad_left/pad_top (the host passes the cropped size and the crop offsets).
// Weights are in ncnn's stored order [out_c][in_c / group][kernel_h][kernel_w], unflipped:
// ncnn's CPU deconvolution scatters input * weight[k] to output offset k.
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

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Weight { sfp weight[]; };
layout(binding = 3) readonly buffer Bias { sfp bias[]; };

layout(push_constant) uniform Params {
    int w; int h; int c;
    int outw; int outh; int outc;
    int crop_left; int crop_top;
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
    int fx = ox + p.crop_left;
    int fy = oy + p.crop_top;
    float sum = bias_term == 1 ? float(bias[oc]) : 0.0;
    for (int ky = 0; ky < kernel_h; ky++) {
        int sy = fy - ky * dilation_h;
        if (sy < 0 || sy % stride_h != 0) continue;
        int y = sy / stride_h;
        if (y >= p.h) continue;
        for (int kx = 0; kx < kernel_w; kx++) {
            int sx = fx - kx * dilation_w;
            if (sx < 0 || sx % stride_w != 0) continue;
            int x = sx / stride_w;
            if (x >= p.w) continue;
            int k = ky * kernel_w + kx;
            for (int ic = 0; ic < in_per_group; ic++) {
                int cin = g * in_per_group + ic;
                float v = float(x_in[(cin * p.h + y) * p.w + x]);
                sum += v * float(weight[(oc * in_per_group + ic) * maxk + k]);
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
