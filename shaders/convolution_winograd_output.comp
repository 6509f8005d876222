#version 450
// Winograd F(4x4, 3x3), pass 3 of 3: each tile's 36 products M become its 4x4 outputs
// A^T M A, plus the bias, through the activation.
// x = tile (row-major over the output's 4x4 tiles), z = output channel.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int bias_term = 0;
layout(constant_id = 1) const int act_type = 0;
layout(constant_id = 2) const float act_a = 0.0;
layout(constant_id = 3) const float act_b = 0.0;

layout(binding = 0) readonly buffer Products { float m[]; };  // [36][outc][tiles_padded]
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Bias { sfp bias[]; };

layout(push_constant) uniform Params {
    int outw; int outh; int outc;
    int tiles_w; int tiles; int tiles_padded;
} p;

#include "std_minmax.h"
#include "activation.h"
#include "index.h"

void invoke(int t, int oc) {
    int stride = p.outc * p.tiles_padded;
    int base = oc * p.tiles_padded + t;
    // A^T M: four combinations of the six rows, for every column
    float r[4][6];
    for (int j = 0; j < 6; j++) {
        float s0 = m[base + j * stride];
        float s1 = m[base + (6 + j) * stride];
        float s2 = m[base + (12 + j) * stride];
        float s3 = m[base + (18 + j) * stride];
        float s4 = m[base + (24 + j) * stride];
        float s5 = m[base + (30 + j) * stride];
        r[0][j] = s0 + s1 + s2 + s3 + s4;
        r[1][j] = s1 - s2 + 2.0 * (s3 - s4);
        r[2][j] = s1 + s2 + 4.0 * (s3 + s4);
        r[3][j] = s1 - s2 + 8.0 * (s3 - s4) + s5;
    }
    float bv = bias_term == 1 ? float(bias[oc]) : 0.0;
    int oy0 = (t / p.tiles_w) * 4;
    int ox0 = (t % p.tiles_w) * 4;
    for (int i = 0; i < 4; i++) {
        int oy = oy0 + i;
        if (oy >= p.outh) break;
        float o[4];
        o[0] = r[i][0] + r[i][1] + r[i][2] + r[i][3] + r[i][4];
        o[1] = r[i][1] - r[i][2] + 2.0 * (r[i][3] - r[i][4]);
        o[2] = r[i][1] + r[i][2] + 4.0 * (r[i][3] + r[i][4]);
        o[3] = r[i][1] - r[i][2] + 8.0 * (r[i][3] - r[i][4]) + r[i][5];
        int at = (oc * p.outh + oy) * p.outw;
        for (int j = 0; j < 4; j++) {
            if (ox0 + j >= p.outw) break;
            x_out[at + ox0 + j] = sfp(activation(o[j] + bv, act_type, act_a, act_b));
        }
    }
}

void main() {
    ivec3 id = ivec3(gl_GlobalInvocationID);
    ivec3 stride = grid_stride();
    for (int oc = id.z; oc < p.outc; oc += stride.z)
        for (int t = id.x; t < p.tiles; t += stride.x) invoke(t, oc);
}
