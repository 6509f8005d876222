#version 450
// Ungrouped convolution on large output maps as an implicit GEMM: out[oc][pixel] =
// sum over k of weight[oc][k] * patch[k][pixel], k = (input channel, ky, kx) in ncnn's weight
// order, the patch matrix never stored (each value read from the input where it is needed).
// A workgroup of 256 invocations computes a 64-channel x 64-pixel tile; every step stages 16
// taps of both operands in shared memory (the next step's read into registers meanwhile), and
// each invocation accumulates 4 channels x 4 pixels from them, so one multiply-add costs an
// eighth of a shared load and no global one.
// convolution.comp reads two global values per multiply-add (one output per invocation), which
// leaves a GPU's arithmetic idle on vgg16-like layers (3x3 over 64-512 channels on 28-224 px
// maps). Weights and constants are convolution_splitk.comp's (group is 1).
// A layer whose output makes too few tiles to fill the GPU splits its taps: workgroup z sums
// split_taps of them into its own fp32 slice of `partial`, and convolution_gemm_sum.comp adds
// the slices, the bias and the activation. fp32 accumulation, in k order per invocation.
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

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Weight { sfp weight[]; };
layout(binding = 3) readonly buffer Bias { sfp bias[]; };
layout(binding = 4) writeonly buffer Partial { float partial[]; };  // [split][outc][pixels]

layout(push_constant) uniform Params {
    int w; int h; int c;
    int outw; int outh; int outc;
    int pad_left; int pad_top;
    int split_taps;  // taps per split: all of them when the layer does not split
} p;

#include "std_minmax.h"
#include "activation.h"

#define TILE_M 64  // output channels per workgroup
#define TILE_N 64  // output pixels per workgroup
#define STEP_K 16  // taps staged per step

shared vec4 tile_a[STEP_K][TILE_M / 4];  // [tap][channel / 4]
shared vec4 tile_b[STEP_K][TILE_N / 4];  // [tap][pixel / 4]

#define FETCH 4  // taps of A and of B an invocation stages a step
#include "gemm_operands.h"

void main() {
    const int maxk = kernel_w * kernel_h;
    int taps = p.c * maxk;
    int pixels = p.outw * p.outh;
    int lid = int(gl_LocalInvocationIndex);
    // the 4 x 4 outputs this invocation accumulates
    int col = lid % 16;  // pixels col * 4 .. + 3 of the tile
    int row = lid / 16;  // channels row * 4 .. + 3 of the tile
    // what it stages: 4 taps of one channel's weights, 4 taps of one pixel's patch
    int a_m = lid / 4;
    int a_k = (lid % 4) * 4;
    int b_n = lid % TILE_N;
    int b_k = (lid / TILE_N) * 4;
    int tiles_n = (pixels + TILE_N - 1) / TILE_N;
    int tiles_m = (p.outc + TILE_M - 1) / TILE_M;
    int splits = (taps + p.split_taps - 1) / p.split_taps;
    bool whole = splits == 1;
    // the grid may be capped: tiles in turn (the bounds are the workgroup's, so barriers are
    // reached by all of its invocations)
    for (int tz = int(gl_WorkGroupID.z); tz < splits; tz += int(gl_NumWorkGroups.z)) {
    int k_begin = tz * p.split_taps;
    int k_end = min(taps, k_begin + p.split_taps);
    for (int tm = int(gl_WorkGroupID.y); tm < tiles_m; tm += int(gl_NumWorkGroups.y)) {
        for (int tn = int(gl_WorkGroupID.x); tn < tiles_n; tn += int(gl_NumWorkGroups.x)) {
            int oc0 = tm * TILE_M;
            int px0 = tn * TILE_N;
            int m = oc0 + a_m;
            bool m_ok = m < p.outc;
            int wrow = m * taps;
            int n = px0 + b_n;
            bool n_ok = n < pixels;
            int oy = n_ok ? n / p.outw : 0;
            int y0 = oy * stride_h - p.pad_top;
            int x0 = (n - oy * p.outw) * stride_w - p.pad_left;
            vec4 acc0 = vec4(0.0), acc1 = vec4(0.0), acc2 = vec4(0.0), acc3 = vec4(0.0);
            fetch(k_begin, k_end, m_ok, wrow, a_k, n_ok, b_k, y0, x0);
            for (int k0 = k_begin; k0 < k_end; k0 += STEP_K) {
                for (int j = 0; j < FETCH; j++) {
                    tile_a[a_k + j][a_m / 4][a_m % 4] = next_a[j];
                    tile_b[b_k + j][b_n / 4][b_n % 4] = next_b[j];
                }
                barrier();
                if (k0 + STEP_K < k_end)
                    fetch(k0 + STEP_K, k_end, m_ok, wrow, a_k, n_ok, b_k, y0, x0);
                for (int kk = 0; kk < STEP_K; kk++) {
                    vec4 a = tile_a[kk][row];
                    vec4 b = tile_b[kk][col];
                    acc0 += a.x * b;
                    acc1 += a.y * b;
                    acc2 += a.z * b;
                    acc3 += a.w * b;
                }
                barrier();
            }
            mat4 acc = mat4(acc0, acc1, acc2, acc3);  // [channel][pixel]
            for (int i = 0; i < 4; i++) {
                int oc = oc0 + row * 4 + i;
                if (oc >= p.outc) break;
                float bv = bias_term == 1 ? float(bias[oc]) : 0.0;
                for (int j = 0; j < 4; j++) {
                    int px = px0 + col * 4 + j;
                    if (px >= pixels) break;
                    if (whole)
                        x_out[oc * pixels + px] = sfp(activation(acc[i][j] + bv, act_type, act_a, act_b));
                    else
                        partial[(tz * p.outc + oc) * pixels + px] = acc[i][j];
                }
            }
        }
    }
    }
}
