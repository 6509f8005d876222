#version 450
// Depthwise convolution (group == in_c == out_c): one invocation computes 4 consecutive output
// columns of one channel (COLS: 8 in the flat layout, on CPU devices). Each kernel row's input
// span is loaded once and reused by the outputs (6 loads instead of 12 for a 3x3 stride-1 row
// of 4), edges are branch-free, and the
// channel is the shader's only weight row, so no group constant: one pipeline per
// kernel/stride/dilation/activation serves every channel count.
// Weights are [c][kernel_h][kernel_w]. x = output column / COLS, y = output row, z = channel;
// with flat_columns (CPU devices) x = row * blocks per row + block and y is unused: llvmpipe
// runs a workgroup's invocations 8 at a time along x, so an 8 x 8 workgroup of blocks x rows
// kept 2 of 8 lanes busy on a 7 x 7 map (efficientnet_b0's 672- and 1152-channel layers).
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
// id 12, not 11: convolution.comp declares ids 0-11 with the same bindings and push block, so
// an id it lacks is what tells the two bodies apart when a crafted cache file puts one under
// the other's key (tests/test_cache_content_trust.py)
// 0: the 8 x 8 workgroups of 4-column blocks x rows (GPUs); 4 or 8: the flat layout (CPU
// devices, see above) with that many columns an invocation
layout(constant_id = 12) const int flat_columns = 0;

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
#include "index.h"

// output columns an invocation computes (4 unless flat_columns is 8): on CPU devices every load
// is a loop over the lanes, and 8 columns load a row's span and each weight once for 8 outputs
// (a 3x3 stride-1 layer: 39 loads per 8 outputs instead of 54; lavapipe 0.74-0.86x, 5x5 ones
// 0.50-0.52x)
const int COLS = 4 + flat_columns / 8 * 4;
// input columns under COLS outputs
const int span = (COLS - 1) * stride_w + (kernel_w - 1) * dilation_w + 1;

// one block of COLS columns (tx)
void invoke(int tx, int oy, int ch) {
    int ox0 = tx * COLS;
    if (ox0 >= p.outw || oy >= p.outh || ch >= p.outc) return;

    const int maxk = kernel_w * kernel_h;
    float b = bias_term == 1 ? float(bias[ch]) : 0.0;
    vec4 sum = vec4(b);  // columns 0-3
    vec4 sum_hi = vec4(b);  // columns 4-7 (COLS == 8)
    int x0 = ox0 * stride_w - p.pad_left;
    int y0 = oy * stride_h - p.pad_top;
    int plane = ch * p.w * p.h;
    int wbase = ch * maxk;
    for (int ky = 0; ky < kernel_h; ky++) {
        int y = y0 + ky * dilation_h;
        bool yin = y >= 0 && y < p.h;
        int row = plane + clamp(y, 0, p.h - 1) * p.w;
        float seg[span];
        for (int i = 0; i < span; i++) {
            int x = x0 + i;
            float v = float(x_in[row + clamp(x, 0, p.w - 1)]);
            seg[i] = (yin && x >= 0 && x < p.w) ? v : pad_value;
        }
        for (int kx = 0; kx < kernel_w; kx++) {
            float k = float(weight[wbase + ky * kernel_w + kx]);
            int o = kx * dilation_w;
            sum += k * vec4(seg[o], seg[o + stride_w], seg[o + 2 * stride_w], seg[o + 3 * stride_w]);
            if (COLS == 8) {
                int o4 = o + 4 * stride_w;
                sum_hi += k * vec4(seg[o4], seg[o4 + stride_w], seg[o4 + 2 * stride_w],
                                   seg[o4 + 3 * stride_w]);
            }
        }
    }
    int base = (ch * p.outh + oy) * p.outw;
    for (int j = 0; j < COLS; j++) {
        if (ox0 + j >= p.outw) break;
        float v = j < 4 ? sum[j] : sum_hi[j - 4];
        x_out[base + ox0 + j] = sfp(activation(v, act_type, act_a, act_b));
    }
}

void main() {
    ivec3 id = ivec3(gl_GlobalInvocationID);
    ivec3 stride = grid_stride();
    int blocks = (p.outw + COLS - 1) / COLS;
    if (flat_columns != 0) {
        for (int z = id.z; z < p.outc; z += stride.z)
            for (int i = id.x; i < blocks * p.outh; i += stride.x) invoke(i % blocks, i / blocks, z);
        return;
    }
    for (int z = id.z; z < p.outc; z += stride.z)
        for (int y = id.y; y < p.outh; y += stride.y)
            for (int x = id.x; x < blocks; x += stride.x) invoke(x, y, z);
}
