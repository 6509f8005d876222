#version 450
// Batched, strided matrix product:
//   out[b][i][j] = alpha * (beta * C[b][i][j] + sum_k A[b][i][k] * B[b][k][j])
// in ncnn's Gemm order (the C term first, then k = 0, 1, ..., then alpha: within each range
// of k below; the ranges' sums are then added in range order); with c_last,
//   out[b][i][j] = alpha * sum_k A[b][i][k] * B[b][k][j] + beta * C[b][i][j]
// (attention's scaled scores plus a mask, in that order). Every operand is
// addressed through element strides in push constants, so a transpose is a stride swap, a
// broadcast is a zero stride and one head of a multi-head blob is a batch stride: no copies.
// The batch is two levels (b = b1 * nb2 + b2) for MatMul's broadcast batch dims.
// A workgroup is 8 x 8 x S invocations over a 32 x 32 tile of out: each (x, y) pair owns a
// 4x4 block (two shared vec4 loads feed 16 multiply-adds), and its S invocations along z take
// consecutive ranges of k, whose sums meet in shared memory in range order. The ranges keep a GPU busy on
// products with few tiles (a transformer's 197 x 768 projections made 120 workgroups of 64:
// each invocation ran all 768 steps alone). Workgroup x = column tile, y = row tile, z = batch.
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


// The workgroup's ranges of k (S, its z size) size the shared arrays, so a device with little
// shared memory gets fewer ranges (layers/_strided_gemm.py, _local) rather than a failed build.
#define SPLITS gl_WorkGroupSize.z
shared vec4 partial[SPLITS][64][4];  // the sums of ranges 1 .. S-1, per (x, y) pair (0 unused)

// Each range of k stages 16 steps of its 32 x 32 tile's A and B in shared memory (A k-major,
// rows padded by a vec4 so the stores of 16 steps of one row spread over the banks): a pair's
// 4x4 block then reads two vec4 a step from shared memory instead of 8 floats from global
// memory. The next 16 steps are read into registers while these are multiplied.
#define TILE 32
#define STEP 16
shared vec4 tile_a[SPLITS][STEP][TILE / 4 + 1];  // [range][k][rows / 4]
shared vec4 tile_b[SPLITS][STEP][TILE / 4];      // [range][k][columns / 4]
float next_a[8];
float next_b[8];

// this invocation's 8 floats of A (rows t / 16 + 4 j, step t % 16) and of B (column t % 32,
// steps t / 32 + 2 j) for the steps from k, zero past k1
void fetch(int k, int k1, int t, int row0, int col0, ivec2 bb) {
    int ka = k + t % STEP;
    for (int j = 0; j < 8; j++) {
        int i = min(row0 + t / STEP + 4 * j, p.M - 1);
        int at = bb.x * p.sa1 + bb.y * p.sa2 + i * p.sai + ka * p.sak;
        next_a[j] = ka < k1 ? float(a_data[at]) : 0.0;
    }
    int col = min(col0 + t % TILE, p.N - 1);
    int bcol = bb.x * p.sb1 + bb.y * p.sb2 + col * p.sbj;
    for (int j = 0; j < 8; j++) {
        int kb = k + t / TILE + 2 * j;
        next_b[j] = kb < k1 ? float(b_data[bcol + kb * p.sbk]) : 0.0;
    }
}

// the 32 x 32 tile (tx, ty) of batch b: pair (x, y) owns its 4x4 block, range
// gl_LocalInvocationID.z of its k; every invocation of the workgroup calls it the same number
// of times (barriers)
void invoke(int tx, int ty, int b) {
    int lx = int(gl_LocalInvocationID.x);
    int ly = int(gl_LocalInvocationID.y);
    int j0 = tx * TILE + lx * 4;
    int i0 = ty * TILE + ly * 4;
    ivec2 bb = ivec2(b / p.nb2, b % p.nb2);
    int split = int(gl_LocalInvocationID.z);
    int splits = int(gl_WorkGroupSize.z);
    int t = ly * 8 + lx;

    // clamped rows and columns: edge blocks load valid data and store only what exists
    ivec4 rows = min(ivec4(i0) + ivec4(0, 1, 2, 3), ivec4(p.M - 1));
    ivec4 cols = min(ivec4(j0) + ivec4(0, 1, 2, 3), ivec4(p.N - 1));

    vec4 cv[4];
    int cbase = bb.x * p.sc1 + bb.y * p.sc2;
    ivec4 cc = cols * p.scj;
    for (int r = 0; r < 4; r++) {
        int crow = cbase + rows[r] * p.sci;
        cv[r] = has_c == 1 && split == 0
                    ? vec4(float(c_data[crow + cc.x]), float(c_data[crow + cc.y]),
                           float(c_data[crow + cc.z]), float(c_data[crow + cc.w])) * p.beta
                    : vec4(0.0);
    }
    vec4 acc[4];
    for (int r = 0; r < 4; r++) acc[r] = c_last == 1 ? vec4(0.0) : cv[r];

    int per = (p.K + splits - 1) / splits;
    int k0 = min(p.K, split * per);
    int k1 = min(p.K, k0 + per);
    int steps = (per + STEP - 1) / STEP;  // the same in every range: barriers
    fetch(k0, k1, t, ty * TILE, tx * TILE, bb);
    for (int s = 0; s < steps; s++) {
        int ks = k0 + s * STEP;
        for (int j = 0; j < 8; j++) {
            int r = t / STEP + 4 * j;
            tile_a[split][t % STEP][r / 4][r % 4] = next_a[j];
            tile_b[split][t / TILE + 2 * j][(t % TILE) / 4][t % 4] = next_b[j];
        }
        barrier();
        if (s + 1 < steps)
            fetch(ks + STEP, k1, t, ty * TILE, tx * TILE, bb);
        int count = min(STEP, k1 - ks);
        for (int kk = 0; kk < count; kk++) {
            vec4 av = tile_a[split][kk][ly];
            vec4 bv = tile_b[split][kk][lx];
            acc[0] += av.x * bv;
            acc[1] += av.y * bv;
            acc[2] += av.z * bv;
            acc[3] += av.w * bv;
        }
        barrier();
    }

    int pair = t;
    if (split > 0) {
        for (int r = 0; r < 4; r++) partial[split][pair][r] = acc[r];
    }
    barrier();
    if (split == 0 && i0 < p.M && j0 < p.N) {
        for (int s = 1; s < splits; s++) {
            for (int r = 0; r < 4; r++) acc[r] += partial[s][pair][r];
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
    barrier();  // the next tile writes partial again
}

// tiles in strides of the grid when the host caps x and y: the same count for every invocation
// of a workgroup; z (the batch) is never capped: the host leaves it whole
void main() {
    int tiles_x = (p.N + TILE - 1) / TILE;
    int tiles_y = (p.M + TILE - 1) / TILE;
    for (int ty = int(gl_WorkGroupID.y); ty < tiles_y; ty += int(gl_NumWorkGroups.y))
        for (int tx = int(gl_WorkGroupID.x); tx < tiles_x; tx += int(gl_NumWorkGroups.x))
            invoke(tx, ty, int(gl_WorkGroupID.z));
}
