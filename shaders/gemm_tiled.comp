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
// 16). R = 16 rows as four vec4, NC = 2 columns: 32 accumulators (R = 8, NC = 4 took 1.10x
// the time on vision_transformer, lavapipe: 5 loads per 32 multiply-adds instead of 4).
// On GPUs the B loads are coalesced along the lanes and A comes from registers, not memory.
// Needs a subgroup size of 8 to 64 dividing the workgroup (the host checks). The sum runs over
// k in order, in fp32, as gemm.comp's does.
// Where both operands run along k in memory (A row-major, B transposed: a Linear's weights,
// attention's q @ k^T) and every offset is a multiple of 4, loads take four k at once through
// vec4 views of the same buffers: one loop over the lanes brings 4 values instead of 1, so a
// step of 4 k costs R / 8 A + NC B loads instead of R / 2 + 4 * NC (vision_transformer on
// lavapipe 0.62x with the shuffles). Same products, same order: bit-identical to the scalar
// path.
// Workgroup: 64 invocations = gl_NumSubgroups subgroups, laid out sgr x sgc (sgc up to 4) over
// a tile of (sgr * R) rows by (sgc * S * NC) columns: 32 x 64 with llvmpipe's 8 lanes.
// x loops over tiles, z over the batch (both in grid strides, so the host may cap them at the
// device's limits).
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

const int R = 16;  // rows per subgroup (four vec4 quarters)
const int NC = 2;  // columns per invocation

// acc<column>q<rows 4q .. 4q + 3>: plain vectors, so nothing is an indexed array in the k loop
vec4 acc0q0, acc0q1, acc0q2, acc0q3, acc1q0, acc1q1, acc1q2, acc1q3;
vec4 a_q0, a_q1, a_q2, a_q3;  // A[rows 4q .. 4q + 3][k0 + lane % 8]
ivec4 a_row_q0, a_row_q1, a_row_q2, a_row_q3;  // element offset of each (clamped) row of A
ivec2 b_col;  // element offset of each (clamped) column of B

// one column's 16 rows of multiply-adds with the A vectors r0-r3 and this lane's B value b
#define COLUMN(c, b) \
    acc##c##q0 += r0 * b; acc##c##q1 += r1 * b; acc##c##q2 += r2 * b; acc##c##q3 += r3 * b;

// one k of the current chunk: A[.][k0 + kk] from lane kk (a shuffle), times this lane's B
#define KSTEP(kk) { \
    int bk = (k0 + kk) * p.sbk; \
    float b0 = float(b_data[b_col.x + bk]); \
    float b1 = float(b_data[b_col.y + bk]); \
    vec4 r0 = subgroupShuffle(a_q0, uint(kk)); \
    vec4 r1 = subgroupShuffle(a_q1, uint(kk)); \
    vec4 r2 = subgroupShuffle(a_q2, uint(kk)); \
    vec4 r3 = subgroupShuffle(a_q3, uint(kk)); \
    COLUMN(0, b0) COLUMN(1, b1) \
}

// The vec4 path: four k a step. Lane l holds A[row l % 8] (ra, from a_lo) and A[row 8 + l % 8]
// (rb, from a_hi) at
// k0 .. k0 + 3, one load each; rows 0-15 come from lanes 0-7 by subgroupShuffle, and each lane
// loads its NC columns' B[k0 .. k0 + 3] (one load each). KQ is one k (component c).
#define KQ(c) { \
    vec4 r0 = vec4(s0.c, s1.c, s2.c, s3.c); \
    vec4 r1 = vec4(s4.c, s5.c, s6.c, s7.c); \
    vec4 r2 = vec4(t0.c, t1.c, t2.c, t3.c); \
    vec4 r3 = vec4(t4.c, t5.c, t6.c, t7.c); \
    COLUMN(0, v0.c) COLUMN(1, v1.c) \
}
#define KSTEP4 { \
    vec4 ra = vec4(a4_data[(a_lo + k0) >> 2]); \
    vec4 rb = vec4(a4_data[(a_hi + k0) >> 2]); \
    vec4 s0 = subgroupShuffle(ra, 0u), s1 = subgroupShuffle(ra, 1u); \
    vec4 s2 = subgroupShuffle(ra, 2u), s3 = subgroupShuffle(ra, 3u); \
    vec4 s4 = subgroupShuffle(ra, 4u), s5 = subgroupShuffle(ra, 5u); \
    vec4 s6 = subgroupShuffle(ra, 6u), s7 = subgroupShuffle(ra, 7u); \
    vec4 t0 = subgroupShuffle(rb, 0u), t1 = subgroupShuffle(rb, 1u); \
    vec4 t2 = subgroupShuffle(rb, 2u), t3 = subgroupShuffle(rb, 3u); \
    vec4 t4 = subgroupShuffle(rb, 4u), t5 = subgroupShuffle(rb, 5u); \
    vec4 t6 = subgroupShuffle(rb, 6u), t7 = subgroupShuffle(rb, 7u); \
    vec4 v0 = vec4(b4_data[(b_col.x + k0) >> 2]); \
    vec4 v1 = vec4(b4_data[(b_col.y + k0) >> 2]); \
    KQ(x) KQ(y) KQ(z) KQ(w) \
}

// Whether the vec4 path applies: k runs along memory in A and B, and K and every stride that
// can move a row, a column or a batch are multiples of 4 (so is every offset it computes).
bool k_runs_in_fours() {
    return vec4_loads == 1 && p.sak == 1 && p.sbk == 1
        && ((p.K | p.sai | p.sa1 | p.sa2 | p.sbj | p.sb1 | p.sb2) & 3) == 0;
}

vec4 load_rows(ivec4 o) {
    return vec4(float(a_data[o.x]), float(a_data[o.y]), float(a_data[o.z]), float(a_data[o.w]));
}

void load_a(int k0) {
    int k = min(k0 + int(gl_SubgroupInvocationID & 7u), p.K - 1) * p.sak;
    a_q0 = load_rows(a_row_q0 + k);
    a_q1 = load_rows(a_row_q1 + k);
    a_q2 = load_rows(a_row_q2 + k);
    a_q3 = load_rows(a_row_q3 + k);
}

// beta * C at (clamped) rows, one column, where C comes before alpha
vec4 c_term(int cbase, ivec4 rows, int col) {
    if (p.has_c == 0 || p.c_last == 1) return vec4(0.0);
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

ivec4 rows_from(int i) { return min(ivec4(i) + ivec4(0, 1, 2, 3), ivec4(p.M - 1)); }

#define INIT_COLUMN(c, col) \
    acc##c##q0 = c_term(cbase, rows_q0, col); acc##c##q1 = c_term(cbase, rows_q1, col); \
    acc##c##q2 = c_term(cbase, rows_q2, col); acc##c##q3 = c_term(cbase, rows_q3, col);
#define STORE_COLUMN(c, j) \
    store(obase, cbase, i0, j, acc##c##q0, 0); store(obase, cbase, i0, j, acc##c##q1, 4); \
    store(obase, cbase, i0, j, acc##c##q2, 8); store(obase, cbase, i0, j, acc##c##q3, 12);

void tile(int i0, int j0, ivec2 bb) {
    int S = int(gl_SubgroupSize);
    int cbase = bb.x * p.sc1 + bb.y * p.sc2;
    ivec2 cols = min(ivec2(j0) + ivec2(0, S), ivec2(p.N - 1));
    b_col = bb.x * p.sb1 + bb.y * p.sb2 + cols * p.sbj;
    ivec4 rows_q0 = rows_from(i0), rows_q1 = rows_from(i0 + 4);
    ivec4 rows_q2 = rows_from(i0 + 8), rows_q3 = rows_from(i0 + 12);
    int abase = bb.x * p.sa1 + bb.y * p.sa2;
    a_row_q0 = abase + rows_q0 * p.sai;
    a_row_q1 = abase + rows_q1 * p.sai;
    a_row_q2 = abase + rows_q2 * p.sai;
    a_row_q3 = abase + rows_q3 * p.sai;
    INIT_COLUMN(0, cols.x) INIT_COLUMN(1, cols.y)

    int k0 = 0;
    if (k_runs_in_fours()) {
        int l8 = int(gl_SubgroupInvocationID & 7u);
        int a_lo = abase + min(i0 + l8, p.M - 1) * p.sai;  // this lane's row of rows 0-7
        int a_hi = abase + min(i0 + 8 + l8, p.M - 1) * p.sai;  // and of rows 8-15
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
    STORE_COLUMN(0, j0) STORE_COLUMN(1, j0 + S)
}

void main() {
    int S = int(gl_SubgroupSize);
    int sg = int(gl_SubgroupID);
    int sgc = int(min(gl_NumSubgroups, 4u));
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
