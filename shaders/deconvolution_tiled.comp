#version 450
// Transposed convolution for group == 1 and dilation 1 on CPU devices, tiled as
// convolution_tiled.comp: one invocation computes 8 output channels at 4 output columns of one
// phase (ox = px + stride_w * t, t consecutive), so every column of a block takes the same
// kernel columns (kx = px + crop_left mod stride_w, then every stride_w-th) and no lane runs a
// tap that does not land on its output. deconvolution.comp tests every tap per output and loads
// both operands per multiply-add: cunet's 2x2 stride-2 layer took 11 ms on lavapipe.
// Weights are repacked by the layer as [out_c / 8][in_c][kernel_h * kernel_w][8].
// x = the block, phase-major (then output row of that phase, then block of 4 in the row), so
// neighbouring lanes share their taps; z = output channel / 8.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int kernel_w = 1;
layout(constant_id = 1) const int kernel_h = 1;
layout(constant_id = 4) const int stride_w = 1;
layout(constant_id = 5) const int stride_h = 1;
layout(constant_id = 7) const int bias_term = 0;
layout(constant_id = 8) const int act_type = 0;
layout(constant_id = 9) const float act_a = 0.0;
layout(constant_id = 10) const float act_b = 0.0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Weight { sfpvec4 weight[]; };
layout(binding = 3) readonly buffer Bias { sfp bias[]; };

layout(push_constant) uniform Params {
    int w; int h; int c;
    int outw; int outh; int outc;
    int crop_left; int crop_top;
} p;

#include "std_minmax.h"
#include "activation.h"
#include "index.h"

// blocks of 4 columns in one output row of one phase, and rows of one phase
int row_blocks() { return ((p.outw + stride_w - 1) / stride_w + 3) / 4; }
int phase_rows() { return (p.outh + stride_h - 1) / stride_h; }

// block b of row qy in phase (py, px), output channels 8 * tz ...
void invoke(int py, int px, int qy, int b, int tz) {
    int oy = py + stride_h * qy;
    int ox0 = px + stride_w * 4 * b;
    int oc0 = tz * 8;
    if (oy >= p.outh || ox0 >= p.outw || oc0 >= p.outc) return;

    const int maxk = kernel_w * kernel_h;
    vec4 a0 = vec4(0.0), a1 = vec4(0.0), a2 = vec4(0.0), a3 = vec4(0.0);  // channels 0-3
    vec4 b0 = vec4(0.0), b1 = vec4(0.0), b2 = vec4(0.0), b3 = vec4(0.0);  // channels 4-7
    int fy = oy + p.crop_top;
    int fx = px + p.crop_left;  // the full-output column of t = 0, less 4 * b * stride_w
    int plane_size = p.w * p.h;
    for (int ky = fy % stride_h; ky < kernel_h; ky += stride_h) {
        int y = (fy - ky) / stride_h;  // exact: fy - ky is a multiple of stride_h
        bool yin = fy >= ky && y < p.h;
        int row = clamp(y, 0, p.h - 1) * p.w;
        for (int kx = fx % stride_w; kx < kernel_w; kx += stride_w) {
            // fx - kx is a multiple of stride_w, possibly negative: exact division either way
            ivec4 x = ivec4((fx - kx) / stride_w + 4 * b) + ivec4(0, 1, 2, 3);
            bvec4 ok = bvec4(yin && x.x >= 0 && x.x < p.w, yin && x.y >= 0 && x.y < p.w,
                             yin && x.z >= 0 && x.z < p.w, yin && x.w >= 0 && x.w < p.w);
            ivec4 xc = clamp(x, ivec4(0), ivec4(p.w - 1));
            int wv = (tz * p.c * maxk + ky * kernel_w + kx) * 2;
            int at = row;
            for (int ic = 0; ic < p.c; ic++) {
                vec4 v = vec4(float(x_in[at + xc.x]), float(x_in[at + xc.y]),
                              float(x_in[at + xc.z]), float(x_in[at + xc.w]));
                v = mix(vec4(0.0), v, ok);
                vec4 wa = vec4(weight[wv]);
                vec4 wb = vec4(weight[wv + 1]);
                wv += maxk * 2;
                at += plane_size;
                a0 += v.x * wa; b0 += v.x * wb;
                a1 += v.y * wa; b1 += v.y * wb;
                a2 += v.z * wa; b2 += v.z * wb;
                a3 += v.w * wa; b3 += v.w * wb;
            }
        }
    }
    mat4 lo = mat4(a0, a1, a2, a3);  // [column][channel]
    mat4 hi = mat4(b0, b1, b2, b3);
    for (int i = 0; i < 8; i++) {
        int oc = oc0 + i;
        if (oc >= p.outc) break;
        float bv = bias_term == 1 ? float(bias[oc]) : 0.0;
        int base = (oc * p.outh + oy) * p.outw;
        for (int j = 0; j < 4; j++) {
            int ox = ox0 + stride_w * j;
            if (ox >= p.outw) break;
            float s = i < 4 ? lo[j][i] : hi[j][i - 4];
            x_out[base + ox] = sfp(activation(s + bv, act_type, act_a, act_b));
        }
    }
}

void main() {
    ivec3 id = ivec3(gl_GlobalInvocationID);
    ivec3 stride = grid_stride();
    int blocks = row_blocks();
    int per_phase = phase_rows() * blocks;
    int total = stride_h * stride_w * per_phase;
    for (int z = id.z; z < (p.outc + 7) / 8; z += stride.z) {
        for (int i = id.x; i < total; i += stride.x) {
            int phase = i / per_phase;
            int r = i % per_phase;
            invoke(phase / stride_w, phase % stride_w, r / blocks, r % blocks, z);
        }
    }
}
