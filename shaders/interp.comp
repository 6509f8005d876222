#version 450
// Interp of a (c, h, w) blob: 1 nearest, 2 bilinear, 3 bicubic (A = -0.75, clamped taps, which
// equals ncnn's folded edge coefficients). The host passes ncnn's scale factors: for nearest
// in = min(int(out * scale), size - 1); for the others src = (out + 0.5) * scale - 0.5, or
// out * scale with align_corner.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int resize_type = 1;
layout(constant_id = 1) const int align_corner = 0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params {
    int w; int h; int c; int outw; int outh;
    float scale_x; float scale_y;
} p;

#include "index.h"

float src_coord(int o, float scale) {
    return align_corner == 1 ? float(o) * scale : (float(o) + 0.5) * scale - 0.5;
}

float at(int plane, int x, int y) {
    return float(x_in[plane + clamp(y, 0, p.h - 1) * p.w + clamp(x, 0, p.w - 1)]);
}

void cubic(float t, out vec4 k) {
    const float A = -0.75;
    float x0 = t + 1.0, x1 = t, x2 = 1.0 - t, x3 = 2.0 - t;
    k.x = ((A * x0 - 5.0 * A) * x0 + 8.0 * A) * x0 - 4.0 * A;
    k.y = ((A + 2.0) * x1 - (A + 3.0)) * x1 * x1 + 1.0;
    k.z = ((A + 2.0) * x2 - (A + 3.0)) * x2 * x2 + 1.0;
    k.w = 1.0 - k.x - k.y - k.z;
}

void invoke(int ox, int oy, int ch) {
    if (ox >= p.outw || oy >= p.outh || ch >= p.c) return;
    int plane = ch * p.w * p.h;
    float v;
    if (resize_type == 1) {
        int x = min(int(float(ox) * p.scale_x), p.w - 1);
        int y = min(int(float(oy) * p.scale_y), p.h - 1);
        v = float(x_in[plane + y * p.w + x]);
    } else if (resize_type == 2) {
        float fx = src_coord(ox, p.scale_x);
        float fy = src_coord(oy, p.scale_y);
        int sx = int(floor(fx));
        int sy = int(floor(fy));
        fx -= float(sx);
        fy -= float(sy);
        if (sx < 0) { sx = 0; fx = 0.0; }
        if (sy < 0) { sy = 0; fy = 0.0; }
        if (sx >= p.w - 1) { sx = max(p.w - 2, 0); fx = p.w > 1 ? 1.0 : 0.0; }
        if (sy >= p.h - 1) { sy = max(p.h - 2, 0); fy = p.h > 1 ? 1.0 : 0.0; }
        float a = at(plane, sx, sy) * (1.0 - fx) + at(plane, sx + 1, sy) * fx;
        float b = at(plane, sx, sy + 1) * (1.0 - fx) + at(plane, sx + 1, sy + 1) * fx;
        v = a * (1.0 - fy) + b * fy;
    } else {
        float fx = src_coord(ox, p.scale_x);
        float fy = src_coord(oy, p.scale_y);
        int sx = int(floor(fx));
        int sy = int(floor(fy));
        vec4 kx, ky;
        cubic(fx - float(sx), kx);
        cubic(fy - float(sy), ky);
        v = 0.0;
        for (int j = 0; j < 4; j++) {
            float row = 0.0;
            for (int i = 0; i < 4; i++) row += at(plane, sx - 1 + i, sy - 1 + j) * kx[i];
            v += row * ky[j];
        }
    }
    x_out[(ch * p.outh + oy) * p.outw + ox] = sfp(v);
}

void main() {
    ivec3 id = ivec3(gl_GlobalInvocationID);
    ivec3 stride = grid_stride();
    for (int z = id.z; z < p.c; z += stride.z)
        for (int y = id.y; y < p.outh; y += stride.y)
            for (int x = id.x; x < p.outw; x += stride.x) invoke(x, y, z);
}
