#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
// gemm.comp's batched strided product (same operands, strides, C order and c_last), tiled
// for devices where every per-invocation load is expensive (llvmpipe runs each one as a
// scalar loop over the lanes of a subgroup):
//   - the lanes of a subgroup share R rows and own NC columns each (lane + S * c), so a B load
//     brings S distinct, all-used values and feeds R multiply-adds;
//   - A is loaded 8 k at a time, lane l holding A[row][k0 + l % 8], and handed to every lane
//     by subgroupShuffle from a constant lane, so one A load feeds 8 * NC multiply-adds.
//     Not subgroupBroadcast, the same thing on paper: llvmpipe (Mesa 22.3) runs a broadcast
//     as a loop over the lanes that looks for the first active one, for each component, and a
//     shuffle as one vpermd (vision_transformer on lavapipe 0.58x).
// Per k and lane: NC loads of B + R / 8 loads of A for R * NC multiply-adds (gemm.comp: 8 for
// 16). R = 8 rows as two vec4, NC = 4 columns: 32 accumulators.
// On GPUs the B loads are coalesced along the lanes and A comes from registers, not memory.
// Needs a subgroup size of 8 to 64 dividing the workgroup (the host checks). The sum runs over
// k in order, in fp32, as gemm.comp's does.
// Where both operands run along k in memory (A row-major, B transposed: a Linear's weights,
// attention's q @ k^T) and every offset is a multiple of 4, loads take four k at once through
// vec4 views of the same buffers: one loop over the lanes brings 4 values instead of 1, so a
// step of 4 k costs 1 A + NC B loads instead of 4 + 4 * NC (vision_transformer on lavapipe
// 0.62x with the shuffles). Same products, same order: bit-identical to the scalar path.
// Workgroup: 64 invocations = gl_NumSubgroups subgroups, laid out sgr x sgc over a tile of
// (sgr * R) rows by (sgc * S * NC) columns. x loops over tiles, z over the batch (both in grid
// strides, so the host may cap them at the device's limits).
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int vec4_loads = 1;  // 0: the scalar path only (A/B runs)

layout(binding = 0) readonly buffer A { sfp a_data[]; };
layout(binding = 1) readonly buffer B { sfp b_data[]; };
// the same two buffers, 4 elements an index (the vec4 path)
layout(binding = 0) readonly buffer A4 { sfpvec4 a4_data[]; };
layout(binding = 1) readonly buffer B4 { sfpvec4 b4_data[]; };
layout(binding = 2) readonly buffer C { sfp c_data[]; };
layout(binding = 3) writeonly buffer Out { sfp out_data[]; };

// as gemm.comp, plus the batch count nb (= nb1 * nb2); and gemm.comp's specialization
// constants has_c and c_last as push constants: llvmpipe compiles each pipeline at its first
// dispatch (150-200 ms for this shader), so a transformer's products, with and without C, C
// before or after alpha, share one pipeline
layout(push_constant) uniform Params {
    int M; int N; int K; int nb2;
    int sa1; int sa2; int sai; int sak;
    int sb1; int sb2; int sbk; int sbj;
    int sc1; int sc2; int sci; int scj;
    int so1; int so2; int soi; int soj;
    float alpha; float beta;
    int nb;
    int has_c; int c_last;
} p;

const int R = 8;  // rows per subgroup (two vec4 halves)
const int NC = 4;  // columns per invocation

// acc<column><rows 0-3 | 4-7>: plain vectors, so nothing is an indexed array in the k loop
vec4 acc0lo, acc0hi, acc1lo, acc1hi, acc2lo, acc2hi, acc3lo, acc3hi;
vec4 a_lo, a_hi;  // A[rows 0-3 | 4-7][k0 + lane % 8]
ivec4 a_row_lo, a_row_hi;  // element offset of each (clamped) row of A
ivec4 b_col;  // element offset of each (clamped) column of B

// one k of the current chunk: A[.][k0 + kk] from lane kk (a shuffle), times this lane's B
#define KSTEP(kk) { \
    int bk = (k0 + kk) * p.sbk; \
    float b0 = float(b_data[b_col.x + bk]); \
    float b1 = float(b_data[b_col.y + bk]); \
    float b2 = float(b_data[b_col.z + bk]); \
    float b3 = float(b_data[b_col.w + bk]); \
    vec4 lo = subgroupShuffle(a_lo, uint(kk)); \
    vec4 hi = subgroupShuffle(a_hi, uint(kk)); \
    acc0lo += lo * b0; acc0hi += hi * b0; \
    acc1lo += lo * b1; acc1hi += hi * b1; \
    acc2lo += lo * b2; acc2hi += hi * b2; \
    acc3lo += lo * b3; acc3hi += hi * b3; \
}

// The vec4 path: four k a step. Lane l holds A[row l % 8][k0 .. k0 + 3] (ra, one load);
// rows 0-7 come from lanes 0-7 by subgroupShuffle, and each lane loads its NC columns'
// B[k0 .. k0 + 3] (one load each). KQ is the multiply-add of one k (component c).
#define KQ(c) { \
    vec4 lo = vec4(r0.c, r1.c, r2.c, r3.c); \
    vec4 hi = vec4(r4.c, r5.c, r6.c, r7.c); \
    acc0lo += lo * v0.c; acc0hi += hi * v0.c; \
    acc1lo += lo * v1.c; acc1hi += hi * v1.c; \
    acc2lo += lo * v2.c; acc2hi += hi * v2.c; \
    acc3lo += lo * v3.c; acc3hi += hi * v3.c; \
}
#define KSTEP4 { \
    vec4 ra = vec4(a4_data[(a_lane + k0) >> 2]); \
    vec4 r0 = subgroupShuffle(ra, 0u), r1 = subgroupShuffle(ra, 1u); \
    vec4 r2 = subgroupShuffle(ra, 2u), r3 = subgroupShuffle(ra, 3u); \
    vec4 r4 = subgroupShuffle(ra, 4u), r5 = subgroupShuffle(ra, 5u); \
    vec4 r6 = subgroupShuffle(ra, 6u), r7 = subgroupShuffle(ra, 7u); \
    vec4 v0 = vec4(b4_data[(b_col.x + k0) >> 2]); \
    vec4 v1 = vec4(b4_data[(b_col.y + k0) >> 2]); \
    vec4 v2 = vec4(b4_data[(b_col.z + k0) >> 2]); \
    vec4 v3 = vec4(b4_data[(b_col.w + k0) >> 2]); \
    KQ(x) KQ(y) KQ(z) KQ(w) \
}

// Whether the vec4 path applies: k runs along memory in A and B, and K and every stride that
// can move a row, a column or a batch are multiples of 4 (so is every offset it computes).
bool k_runs_in_fours() {
    return vec4_loads == 1 && p.sak == 1 && p.sbk == 1
        && ((p.K | p.sai | p.sa1 | p.sa2 | p.sbj | p.sb1 | p.sb2) & 3) == 0;
}

void load_a(int k0) {
    int k = min(k0 + int(gl_SubgroupInvocationID & 7u), p.K - 1) * p.sak;
    ivec4 lo = a_row_lo + k, hi = a_row_hi + k;
    a_lo = vec4(float(a_data[lo.x]), float(a_data[lo.y]), float(a_data[lo.z]), float(a_data[lo.w]));
    a_hi = vec4(float(a_data[hi.x]), float(a_data[hi.y]), float(a_data[hi.z]), float(a_data[hi.w]));
}

// beta * C at (clamped) rows, one column
vec4 c_term(int cbase, ivec4 rows, int col) {
    if (p.has_c == 0) return vec4(0.0);
    ivec4 o = cbase + rows * p.sci + col * p.scj;
    return vec4(float(c_data[o.x]), float(c_data[o.y]), float(c_data[o.z]), float(c_data[o.w]))
           * p.beta;
}

void store(int obase, int cbase, int i0, int j, vec4 v, int r0) {
    if (j >= p.N) return;
    for (int r = 0; r < 4; r++) {
        int i = i0 + r0 + r;
        if (i >= p.M) return;
        float o = v[r] * p.alpha;
        if (p.has_c == 1 && p.c_last == 1) {
            o += float(c_data[cbase + i * p.sci + j * p.scj]) * p.beta;
        }
        out_data[obase + i * p.soi + j * p.soj] = sfp(o);
    }
}

void tile(int i0, int j0, ivec2 bb) {
    int S = int(gl_SubgroupSize);
    int cbase = bb.x * p.sc1 + bb.y * p.sc2;
    ivec4 cols = min(ivec4(j0) + ivec4(0, S, 2 * S, 3 * S), ivec4(p.N - 1));
    b_col = bb.x * p.sb1 + bb.y * p.sb2 + cols * p.sbj;
    ivec4 rows_lo = min(ivec4(i0) + ivec4(0, 1, 2, 3), ivec4(p.M - 1));
    ivec4 rows_hi = min(ivec4(i0) + ivec4(4, 5, 6, 7), ivec4(p.M - 1));
    int abase = bb.x * p.sa1 + bb.y * p.sa2;
    a_row_lo = abase + rows_lo * p.sai;
    a_row_hi = abase + rows_hi * p.sai;
    if (p.c_last == 1) {
        acc0lo = acc0hi = acc1lo = acc1hi = acc2lo = acc2hi = acc3lo = acc3hi = vec4(0.0);
    } else {
        acc0lo = c_term(cbase, rows_lo, cols.x);
        acc0hi = c_term(cbase, rows_hi, cols.x);
        acc1lo = c_term(cbase, rows_lo, cols.y);
        acc1hi = c_term(cbase, rows_hi, cols.y);
        acc2lo = c_term(cbase, rows_lo, cols.z);
        acc2hi = c_term(cbase, rows_hi, cols.z);
        acc3lo = c_term(cbase, rows_lo, cols.w);
        acc3hi = c_term(cbase, rows_hi, cols.w);
    }

    int k0 = 0;
    if (k_runs_in_fours()) {
        int a_lane = abase + min(i0 + int(gl_SubgroupInvocationID & 7u), p.M - 1) * p.sai;
        for (; k0 < p.K; k0 += 4) KSTEP4
    }
    for (; k0 + 8 <= p.K; k0 += 8) {
        load_a(k0);
        KSTEP(0) KSTEP(1) KSTEP(2) KSTEP(3) KSTEP(4) KSTEP(5) KSTEP(6) KSTEP(7)
    }
    int kn = p.K - k0;  // the last partial chunk (uniform branches: every lane takes them)
    if (kn > 0) {
        load_a(k0);
        KSTEP(0)
        if (kn > 1) KSTEP(1)
        if (kn > 2) KSTEP(2)
        if (kn > 3) KSTEP(3)
        if (kn > 4) KSTEP(4)
        if (kn > 5) KSTEP(5)
        if (kn > 6) KSTEP(6)
    }

    int obase = bb.x * p.so1 + bb.y * p.so2;
    store(obase, cbase, i0, j0, acc0lo, 0);
    store(obase, cbase, i0, j0, acc0hi, 4);
    store(obase, cbase, i0, j0 + S, acc1lo, 0);
    store(obase, cbase, i0, j0 + S, acc1hi, 4);
    store(obase, cbase, i0, j0 + 2 * S, acc2lo, 0);
    store(obase, cbase, i0, j0 + 2 * S, acc2hi, 4);
    store(obase, cbase, i0, j0 + 3 * S, acc3lo, 0);
    store(obase, cbase, i0, j0 + 3 * S, acc3hi, 4);
}

void main() {
    int S = int(gl_SubgroupSize);
    int sg = int(gl_SubgroupID);
    int sgc = gl_NumSubgroups >= 2u ? 2 : 1;
    int sgr = int(gl_NumSubgroups) / sgc;
    int tile_m = sgr * R;
    int tile_n = sgc * S * NC;
    int tiles_n = (p.N + tile_n - 1) / tile_n;
    int tiles = tiles_n * ((p.M + tile_m - 1) / tile_m);
    int lane = int(gl_SubgroupInvocationID);
    for (int b = int(gl_WorkGroupID.z); b < p.nb; b += int(gl_NumWorkGroups.z)) {
        ivec2 bb = ivec2(b / p.nb2, b % p.nb2);
        for (int t = int(gl_WorkGroupID.x); t < tiles; t += int(gl_NumWorkGroups.x)) {
            int i0 = (t / tiles_n) * tile_m + (sg / sgc) * R;
            int j0 = (t % tiles_n) * tile_n + (sg % sgc) * S * NC + lane;
            tile(i0, j0, bb);
        }
    }
}
