#version 450
// Winograd F(4x4, 3x3), pass 1 of 3 (3x3 kernels at stride 1 on CPU devices): each 6x6 input
// tile d, 4 output pixels apart, becomes B^T d B, its 36 values written one plane per position
// so that convolution_winograd_gemm.comp reads 8 consecutive tiles as two vec4.
// x = tile (row-major over the output's 4x4 tiles, padded to a multiple of 8: padding tiles hold
// zeros), z = input channel.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const float pad_value = 0.0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Transformed { float v[]; };  // [36][c][tiles_padded]

layout(push_constant) uniform Params {
    int w; int h; int c;
    int tiles_w; int tiles; int tiles_padded;
    int pad_left; int pad_top;
} p;

#include "index.h"

void invoke(int t, int ic) {
    float d[6][6];
    if (t < p.tiles) {
        int y0 = (t / p.tiles_w) * 4 - p.pad_top;
        int x0 = (t % p.tiles_w) * 4 - p.pad_left;
        int plane = ic * p.w * p.h;
        for (int i = 0; i < 6; i++) {
            int y = y0 + i;
            bool yin = y >= 0 && y < p.h;
            int row = plane + clamp(y, 0, p.h - 1) * p.w;
            for (int j = 0; j < 6; j++) {
                int x = x0 + j;
                // branch-free edges: clamp the index, then replace the value by pad_value
                float value = float(x_in[row + clamp(x, 0, p.w - 1)]);
                d[i][j] = yin && x >= 0 && x < p.w ? value : pad_value;
            }
        }
    } else {
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 6; j++) d[i][j] = 0.0;
    }
    // B^T d: the same six combinations of rows for every column
    float m[6][6];
    for (int j = 0; j < 6; j++) {
        m[0][j] = 4.0 * d[0][j] - 5.0 * d[2][j] + d[4][j];
        m[1][j] = -4.0 * (d[1][j] + d[2][j]) + d[3][j] + d[4][j];
        m[2][j] = 4.0 * (d[1][j] - d[2][j]) - d[3][j] + d[4][j];
        m[3][j] = 2.0 * (d[3][j] - d[1][j]) - d[2][j] + d[4][j];
        m[4][j] = 2.0 * (d[1][j] - d[3][j]) - d[2][j] + d[4][j];
        m[5][j] = 4.0 * d[1][j] - 5.0 * d[3][j] + d[5][j];
    }
    // (B^T d) B: the same combinations of columns, each of the 36 stored in its plane
    int stride = p.c * p.tiles_padded;
    int base = ic * p.tiles_padded + t;
    for (int i = 0; i < 6; i++) {
        int at = base + i * 6 * stride;
        v[at] = 4.0 * m[i][0] - 5.0 * m[i][2] + m[i][4];
        v[at + stride] = -4.0 * (m[i][1] + m[i][2]) + m[i][3] + m[i][4];
        v[at + 2 * stride] = 4.0 * (m[i][1] - m[i][2]) - m[i][3] + m[i][4];
        v[at + 3 * stride] = 2.0 * (m[i][3] - m[i][1]) - m[i][2] + m[i][4];
        v[at + 4 * stride] = 2.0 * (m[i][1] - m[i][3]) - m[i][2] + m[i][4];
        v[at + 5 * stride] = 4.0 * m[i][1] - 5.0 * m[i][3] + m[i][5];
    }
}

void main() {
    ivec3 id = ivec3(gl_GlobalInvocationID);
    ivec3 stride = grid_stride();
    for (int ic = id.z; ic < p.c; ic += stride.z)
        for (int t = id.x; t < p.tiles_padded; t += stride.x) invoke(t, ic);
}
