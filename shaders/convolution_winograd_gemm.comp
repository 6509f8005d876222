#version 450
// Winograd F(4x4, 3x3), pass 2 of 3: for each of the 36 positions, the product of the
// transformed weights U (outc x c) and the transformed tiles V (c x tiles). One invocation
// computes 8 output channels x 8 tiles of one position: per input channel two vec4 of tiles and
// two vec4 of weights feed 64 multiply-adds, as convolution_tiled.comp's 8 x 8 block does.
// Maps of at least 8 blocks of 8 tiles (spread = 0): x = tile block, z = position * channel
// blocks + channel block, the same weights across a workgroup. Smaller maps (spread = 1) would
// leave most of llvmpipe's 8 lanes idle (vgg16's 14x14 layers: 2 tile blocks, 51 ms), so x runs
// over positions and tile blocks and z over channel blocks (16-24 ms there; 40% slower on large
// maps, whose lanes then read different weights).
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(binding = 0) readonly buffer Transformed { vec4 v[]; };  // [36][c][tiles_padded / 4]
layout(binding = 1) writeonly buffer Products { vec4 m[]; };    // [36][outc][tiles_padded / 4]
// [36][outc / 8][c][8], each group of 8 output channels two vec4 (padded with zeros)
layout(binding = 2) readonly buffer Weight { sfpvec4 u[]; };

layout(push_constant) uniform Params {
    int c; int outc; int tiles_padded; int spread;
} p;

#include "index.h"

void invoke(int tb, int z) {
    int blocks = (p.outc + 7) / 8;
    int k = z / blocks;
    int ocb = z - k * blocks;
    int row = p.tiles_padded / 4;  // vec4 per channel row
    int vi = (k * p.c) * row + tb * 2;
    int wi = (z * p.c) * 2;  // (k * blocks + ocb) * c * 2
    vec4 lo[8];  // [tile] channels 0-3
    vec4 hi[8];  // [tile] channels 4-7
    for (int j = 0; j < 8; j++) { lo[j] = vec4(0.0); hi[j] = vec4(0.0); }
    for (int ic = 0; ic < p.c; ic++) {
        vec4 t0 = v[vi];
        vec4 t1 = v[vi + 1];
        vec4 wa = vec4(u[wi]);
        vec4 wb = vec4(u[wi + 1]);
        vi += row;
        wi += 2;
        for (int j = 0; j < 4; j++) {
            lo[j] += t0[j] * wa;
            hi[j] += t0[j] * wb;
            lo[j + 4] += t1[j] * wa;
            hi[j + 4] += t1[j] * wb;
        }
    }
    int oc0 = ocb * 8;
    for (int i = 0; i < 8; i++) {
        if (oc0 + i >= p.outc) break;
        int at = (k * p.outc + oc0 + i) * row + tb * 2;
        if (i < 4) {
            m[at] = vec4(lo[0][i], lo[1][i], lo[2][i], lo[3][i]);
            m[at + 1] = vec4(lo[4][i], lo[5][i], lo[6][i], lo[7][i]);
        } else {
            m[at] = vec4(hi[0][i - 4], hi[1][i - 4], hi[2][i - 4], hi[3][i - 4]);
            m[at + 1] = vec4(hi[4][i - 4], hi[5][i - 4], hi[6][i - 4], hi[7][i - 4]);
        }
    }
}

void main() {
    ivec3 id = ivec3(gl_GlobalInvocationID);
    ivec3 stride = grid_stride();
    int tile_blocks = p.tiles_padded / 8;
    int blocks = (p.outc + 7) / 8;
    // one loop for both layouts (one copy of invoke: llvmpipe compiles at the first dispatch)
    int xs = p.spread == 0 ? tile_blocks : 36 * tile_blocks;
    int zs = p.spread == 0 ? 36 * blocks : blocks;
    for (int z = id.z; z < zs; z += stride.z)
        for (int i = id.x; i < xs; i += stride.x) {
            int k = p.spread == 0 ? z / blocks : i / tile_blocks;
            int tb = p.spread == 0 ? i : i - k * tile_blocks;
            int ocb = p.spread == 0 ? z - k * blocks : z;
            invoke(tb, k * blocks + ocb);
        }
}
