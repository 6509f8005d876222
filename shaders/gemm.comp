#version 450
// Batched, strided matrix product:
//   out[b][i][j] = alpha * (beta * C[b][i][j] + sum_k A[b][i][k] * B[b][k][j])
// in ncnn's Gemm order (the C term first, then k = 0, 1, ..., then alpha); with c_last,
//   out[b][i][j] = alpha * sum_k A[b][i][k] * B[b][k][j] + beta * C[b][i][j]
// (attention's scaled scores plus a mask, in that order). Every operand is
// addressed through element strides in push constants, so a transpose is a stride swap, a
// broadcast is a zero stride and one head of a multi-head blob is a batch stride: no copies.
// The batch is two levels (b = b1 * nb2 + b2) for MatMul's broadcast batch dims.
// One invocation computes a 4x4 block of out: 8 loads feed 16 multiply-adds (llvmpipe runs
// each per-lane load as a scalar loop). x = column block, y = row block, z = batch.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int has_c = 0;
layout(constant_id = 1) const int c_last = 0;

layout(binding = 0) readonly buffer A { sfp a_data[]; };
layout(binding = 1) readonly buffer B { sfp b_data[]; };
layout(binding = 2) readonly buffer C { sfp c_data[]; };
layout(binding = 3) writeonly buffer Out { sfp out_data[]; };

// element strides per operand: batch level 1, batch level 2, row, column (k for A's column
// and B's row)
layout(push_constant) uniform Params {
    int M; int N; int K; int nb2;
    int sa1; int sa2; int sai; int sak;
    int sb1; int sb2; int sbk; int sbj;
    int sc1; int sc2; int sci; int scj;
    int so1; int so2; int soi; int soj;
    float alpha; float beta;
} p;

#include "index.h"

// the 4x4 block (bi, bj) of batch b
void invoke(int bj, int bi, int b) {
    int j0 = bj * 4;
    int i0 = bi * 4;
    if (i0 >= p.M || j0 >= p.N) return;
    ivec2 bb = ivec2(b / p.nb2, b % p.nb2);

    // clamped rows and columns: edge blocks load valid data and store only what exists
    ivec4 rows = min(ivec4(i0) + ivec4(0, 1, 2, 3), ivec4(p.M - 1));
    ivec4 cols = min(ivec4(j0) + ivec4(0, 1, 2, 3), ivec4(p.N - 1));

    vec4 cv[4];
    int cbase = bb.x * p.sc1 + bb.y * p.sc2;
    ivec4 cc = cols * p.scj;
    for (int r = 0; r < 4; r++) {
        int crow = cbase + rows[r] * p.sci;
        cv[r] = has_c == 1 ? vec4(float(c_data[crow + cc.x]), float(c_data[crow + cc.y]),
                                  float(c_data[crow + cc.z]), float(c_data[crow + cc.w])) * p.beta
                           : vec4(0.0);
    }
    vec4 acc[4];
    for (int r = 0; r < 4; r++) acc[r] = c_last == 1 ? vec4(0.0) : cv[r];

    ivec4 arow = bb.x * p.sa1 + bb.y * p.sa2 + rows * p.sai;
    ivec4 bcol = bb.x * p.sb1 + bb.y * p.sb2 + cols * p.sbj;
    for (int k = 0; k < p.K; k++) {
        int ak = k * p.sak;
        int bk = k * p.sbk;
        vec4 bv = vec4(float(b_data[bcol.x + bk]), float(b_data[bcol.y + bk]),
                       float(b_data[bcol.z + bk]), float(b_data[bcol.w + bk]));
        acc[0] += float(a_data[arow.x + ak]) * bv;
        acc[1] += float(a_data[arow.y + ak]) * bv;
        acc[2] += float(a_data[arow.z + ak]) * bv;
        acc[3] += float(a_data[arow.w + ak]) * bv;
    }

    int obase = bb.x * p.so1 + bb.y * p.so2;
    for (int r = 0; r < 4; r++) {
        if (i0 + r >= p.M) break;
        for (int c = 0; c < 4; c++) {
            if (j0 + c >= p.N) break;
            float v = acc[r][c] * p.alpha;
            if (c_last == 1) v += cv[r][c];
            out_data[obase + (i0 + r) * p.soi + (j0 + c) * p.soj] = sfp(v);
        }
    }
}

// x and y loop when the host caps them; z (the batch) is never capped: the host leaves it whole
void main() {
    ivec3 id = ivec3(gl_GlobalInvocationID);
    ivec3 stride = grid_stride();
    for (int y = id.y; y < (p.M + 3) / 4; y += stride.y)
        for (int x = id.x; x < (p.N + 3) / 4; x += stride.x) invoke(x, y, id.z);
}
