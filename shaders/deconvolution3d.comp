#version 450
// Deconvolution3D / DeconvolutionDepthWise3D as a gather: each output value sums the input
// taps that scatter onto it (ncnn scatters input * weight[k] to offset k: no kernel flip). The
// output is the full deconvolution cut by crop_left / crop_top / crop_front (the host passes
// the cut size and offsets). One invocation per value of the flat (c, d, h, w) output.
// Weights are ncnn's [out_c][in_c / group][kd][kh][kw].
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

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Weight { sfp weight[]; };
layout(binding = 3) readonly buffer Bias { sfp bias[]; };

layout(push_constant) uniform Params {
    int w; int h; int d; int c;
    int outw; int outh; int outd; int outc;
    int crop_left; int crop_top; int crop_front;
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
    int fz = (i % volume) / plane + p.crop_front;
    int fy = (i % plane) / p.outw + p.crop_top;
    int fx = i % p.outw + p.crop_left;

    int in_per_group = p.c / group;
    int g = oc / (p.outc / group);
    int maxk = kernel_w * kernel_h * kernel_d;
    float sum = bias_term == 1 ? float(bias[oc]) : 0.0;
    for (int kz = 0; kz < kernel_d; kz++) {
        int sz = fz - kz * dilation_d;
        if (sz < 0 || sz % stride_d != 0 || sz / stride_d >= p.d) continue;
        for (int ky = 0; ky < kernel_h; ky++) {
            int sy = fy - ky * dilation_h;
            if (sy < 0 || sy % stride_h != 0 || sy / stride_h >= p.h) continue;
            for (int kx = 0; kx < kernel_w; kx++) {
                int sx = fx - kx * dilation_w;
                if (sx < 0 || sx % stride_w != 0 || sx / stride_w >= p.w) continue;
                int voxel = ((sz / stride_d) * p.h + sy / stride_h) * p.w + sx / stride_w;
                int k = (kz * kernel_h + ky) * kernel_w + kx;
                for (int ic = 0; ic < in_per_group; ic++) {
                    int cin = g * in_per_group + ic;
                    float v = float(x_in[cin * p.d * p.h * p.w + voxel]);
                    sum += v * float(weight[(oc * in_per_group + ic) * maxk + k]);
                }
            }
        }
    }
    x_out[i] = sfp(activation(sum, act_type, act_a, act_b));
}
