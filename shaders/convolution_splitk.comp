#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
// Convolution for deep layers on GPUs: one subgroup computes PX = 4 consecutive output pixels
// of one output channel, its lanes splitting the input channels of its group (lane, lane + S,
// ...) and summing at the end with subgroupAdd. convolution.comp runs one output per
// invocation, each over all in_c * kernel_h * kernel_w taps in turn; on a deep layer with a small
// map (7x7 x 512 outputs over 4608 taps) that is too few invocations, each with a long chain
// of dependent loads, to fill a GPU. Here every output has S invocations, and the weight loads
// of a 1x1 layer are contiguous across the lanes. Weights and push constants are
// convolution.comp's, and so are the constants, group last (id 11). fp32 accumulation; the
// sum's order differs from convolution.comp's (per-lane partial sums, then the subgroup's
// tree).
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int kernel_w = 1;
layout(constant_id = 1) const int kernel_h = 1;
layout(constant_id = 2) const int dilation_w = 1;
layout(constant_id = 3) const int dilation_h = 1;
layout(constant_id = 4) const int stride_w = 1;
layout(constant_id = 5) const int stride_h = 1;
layout(constant_id = 6) const int bias_term = 0;
layout(constant_id = 7) const int act_type = 0;
layout(constant_id = 8) const float act_a = 0.0;
layout(constant_id = 9) const float act_b = 0.0;
layout(constant_id = 10) const float pad_value = 0.0;
layout(constant_id = 11) const int group = 1;

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
#include "activation.h"

const int PX = 4;

float tap(int plane, int x, int y) {
    bool inside = x >= 0 && x < p.w && y >= 0 && y < p.h;
    return inside ? float(x_in[plane + y * p.w + x]) : pad_value;
}

// Output channel oc, pixels pix0 .. pix0 + 3 (flattened over outh x outw).
void invoke(int oc, int pix0) {
    int npix = p.outw * p.outh;
    ivec4 pix = min(ivec4(pix0) + ivec4(0, 1, 2, 3), ivec4(npix - 1));
    ivec4 x0 = (pix % p.outw) * stride_w - p.pad_left;
    ivec4 y0 = (pix / p.outw) * stride_h - p.pad_top;
    int maxk = kernel_w * kernel_h;
    int in_per_group = p.c / group;
    int first_in = (oc / (p.outc / group)) * in_per_group;
    int wbase = oc * in_per_group * maxk;
    int lanes = int(gl_SubgroupSize);
    vec4 sum = vec4(0.0);
    for (int ic = int(gl_SubgroupInvocationID); ic < in_per_group; ic += lanes) {
        int plane = (first_in + ic) * p.w * p.h;
        int wrow = wbase + ic * maxk;
        for (int ky = 0; ky < kernel_h; ky++) {
            ivec4 y = y0 + ky * dilation_h;
            for (int kx = 0; kx < kernel_w; kx++) {
                ivec4 x = x0 + kx * dilation_w;
                float wv = float(weight[wrow + ky * kernel_w + kx]);
                vec4 v = vec4(tap(plane, x.x, y.x), tap(plane, x.y, y.y), tap(plane, x.z, y.z),
                              tap(plane, x.w, y.w));
                sum += v * wv;
            }
        }
    }
    sum = subgroupAdd(sum);
    int lane = int(gl_SubgroupInvocationID);
    if (lane < PX && pix0 + lane < npix) {
        float b = bias_term == 1 ? float(bias[oc]) : 0.0;
        float v = sum[lane] + b;
        x_out[oc * npix + pix0 + lane] = sfp(activation(v, act_type, act_a, act_b));
    }
}

void main() {
    int quads = (p.outw * p.outh + PX - 1) / PX;
    int items = quads * p.outc;
    int per_group = int(gl_NumSubgroups);
    int first = int(gl_WorkGroupID.x) * per_group + int(gl_SubgroupID);
    int stride = int(gl_NumWorkGroups.x) * per_group;
    for (int item = first; item < items; item += stride) {  // uniform across the subgroup
        int oc = item / quads;
        invoke(oc, (item - oc * quads) * PX);
    }
}
