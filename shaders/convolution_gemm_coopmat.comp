#version 450
// convolution_gemm.comp on the matrix units (VK_NV_cooperative_matrix): the same 64-channel x
// 64-pixel tiles, the same bindings, constants and split of the taps, so a layer swaps one for
// the other. Chosen only where the net asked for fp16 arithmetic and the device multiplies
// 16x16 fp16 blocks into fp32 (layers/_conv_shaders.py, gemm_coopmat).
// Each step stages 32 taps of both operands in shared memory as fp16 (ncnn's fp16 arithmetic
// rounds them the same way) while the next step's are read into registers; the subgroups share
// the tile's 16 blocks of 16 x 16 outputs and accumulate them in fp32 across every step, so
// only the operands are rounded, never the sums. The epilogue (bias, activation, or the fp32
// partial of a split) reads the accumulators back through shared memory, one output column a
// lane, so the writes are coalesced.
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require  // fp16 operands in any build
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
#define STEP_K 32  // taps staged per step: two blocks deep
#define BLOCK 16   // a cooperative matrix is BLOCK x BLOCK
#define INVOCATIONS 256
#define FETCH 8    // taps of one row of A and of one column of B that an invocation stages
// the tile's 16 blocks shared by the workgroup's subgroups: the layer runs this shader only on
// a fixed subgroup of 32 (it compiles for any device), which gives each of the 8 subgroups two
// blocks side by side (one A block)
#define SUBGROUP_SIZE 32
#define SUBGROUPS (INVOCATIONS / SUBGROUP_SIZE)
#define BLOCKS_EACH ((TILE_M / BLOCK) * (TILE_N / BLOCK) / SUBGROUPS)
#define SCOPE 3  // gl_ScopeSubgroup

// Rows padded by 16 bytes: a block's 8 rows of 16 bytes then start in 8 different bank groups
// (unpadded, A's 64-byte and B's 128-byte rows put 4 and 8 of them on the same banks)
#define A_STRIDE (STEP_K + 8)
#define B_STRIDE (TILE_N + 8)
#define C_STRIDE (TILE_N + 4)
shared float16_t tile_a[TILE_M * A_STRIDE];  // [channel][tap]
shared float16_t tile_b[STEP_K * B_STRIDE];  // [tap][pixel]
shared float tile_c[TILE_M * C_STRIDE];      // [channel][pixel], the accumulators read back

#include "gemm_operands.h"

void main() {
    const int maxk = kernel_w * kernel_h;
    int taps = p.c * maxk;
    int pixels = p.outw * p.outh;
    int lid = int(gl_LocalInvocationIndex);
    int sub = int(gl_SubgroupID);
    int a_m = lid / (STEP_K / FETCH);
    int a_k = (lid % (STEP_K / FETCH)) * FETCH;
    int b_n = lid % TILE_N;
    int b_k = (lid / TILE_N) * FETCH;
    int tiles_n = (pixels + TILE_N - 1) / TILE_N;
    int tiles_m = (p.outc + TILE_M - 1) / TILE_M;
    int splits = (taps + p.split_taps - 1) / p.split_taps;
    bool whole = splits == 1;
    // this subgroup's blocks: BLOCKS_EACH side by side in one block row of the tile
    int first = sub * BLOCKS_EACH;
    int bm = first / (TILE_N / BLOCK);
    int bn0 = first % (TILE_N / BLOCK);
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
            fcoopmatNV<32, SCOPE, BLOCK, BLOCK> acc[BLOCKS_EACH];
            for (int i = 0; i < BLOCKS_EACH; i++)
                acc[i] = fcoopmatNV<32, SCOPE, BLOCK, BLOCK>(0.0);
            fetch(k_begin, k_end, m_ok, wrow, a_k, n_ok, b_k, y0, x0);
            for (int k0 = k_begin; k0 < k_end; k0 += STEP_K) {
                for (int j = 0; j < FETCH; j++) {
                    tile_a[a_m * A_STRIDE + a_k + j] = float16_t(next_a[j]);
                    tile_b[(b_k + j) * B_STRIDE + b_n] = float16_t(next_b[j]);
                }
                barrier();
                if (k0 + STEP_K < k_end)
                    fetch(k0 + STEP_K, k_end, m_ok, wrow, a_k, n_ok, b_k, y0, x0);
                for (int kk = 0; kk < STEP_K; kk += BLOCK) {
                    fcoopmatNV<16, SCOPE, BLOCK, BLOCK> a;
                    coopMatLoadNV(a, tile_a, bm * BLOCK * A_STRIDE + kk, A_STRIDE, false);
                    for (int i = 0; i < BLOCKS_EACH; i++) {
                        fcoopmatNV<16, SCOPE, BLOCK, BLOCK> b;
                        coopMatLoadNV(b, tile_b, kk * B_STRIDE + (bn0 + i) * BLOCK, B_STRIDE, false);
                        acc[i] = coopMatMulAddNV(a, b, acc[i]);
                    }
                }
                barrier();
            }
            for (int i = 0; i < BLOCKS_EACH; i++) {
                int at = bm * BLOCK * C_STRIDE + (bn0 + i) * BLOCK;
                coopMatStoreNV(acc[i], tile_c, at, C_STRIDE, false);
            }
            barrier();
            int px = px0 + lid % TILE_N;
            for (int row = lid / TILE_N; row < TILE_M; row += INVOCATIONS / TILE_N) {
                int oc = oc0 + row;
                if (oc >= p.outc || px >= pixels) break;
                float sum = tile_c[row * C_STRIDE + lid % TILE_N];
                if (whole) {
                    float bv = bias_term == 1 ? float(bias[oc]) : 0.0;
                    x_out[oc * pixels + px] = sfp(activation(sum + bv, act_type, act_a, act_b));
                } else {
                    partial[(tz * p.outc + oc) * pixels + px] = sum;
                }
            }
            barrier();  // tile_c is read before the next tile's accumulators overwrite it
        }
    }
    }
}
