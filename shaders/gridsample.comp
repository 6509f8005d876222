#version 450
// GridSample of a (c, h, w) blob at a grid of normalized points, as ncnn's gridsample.cpp:
// the grid is (outh, outw, 2), or (2, outh, outw) with permute_fusion. Padding folds a
// coordinate once (border clamps, reflection reflects once); bilinear and nearest fold the
// sample point, bicubic each of its 16 integer taps; taps still outside read 0.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int sample_type = 1;  // 1 bilinear, 2 nearest, 3 bicubic
layout(constant_id = 1) const int padding_mode = 1;  // 1 zeros, 2 border, 3 reflection
layout(constant_id = 2) const int align_corner = 0;
layout(constant_id = 3) const int permute_fusion = 0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) readonly buffer Grid { sfp grid[]; };
layout(binding = 2) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params {
    int w; int h; int c; int outw; int outh;
} p;

#include "index.h"

float unnormalize(float v, int size) {
    if (align_corner == 1) return (v + 1.0) / 2.0 * float(size - 1);
    return ((v + 1.0) * float(size) - 1.0) / 2.0;
}

float fold(float v, int size) {
    if (padding_mode == 2) return min(float(size - 1), max(v, 0.0));
    if (padding_mode == 3) {
        if (align_corner == 1) {
            float high = float(size - 1);
            return high - abs(abs(v) - high);
        }
        float high = float(size);
        float r = high - abs(abs(v + 0.5) - high) - 0.5;
        return min(float(size - 1), max(r, 0.0));
    }
    return v;
}

float at(int plane, int x, int y) {
    bool inside = x >= 0 && y >= 0 && x < p.w && y < p.h;
    return inside ? float(x_in[plane + y * p.w + x]) : 0.0;
}

vec4 cubic(float t) {
    const float A = -0.75;
    float t0 = t + 1.0, t1 = t, t2 = 1.0 - t;
    vec4 k;
    k.x = A * t0 * t0 * t0 - 5.0 * A * t0 * t0 + 8.0 * A * t0 - 4.0 * A;
    k.y = (A + 2.0) * t1 * t1 * t1 - (A + 3.0) * t1 * t1 + 1.0;
    k.z = (A + 2.0) * t2 * t2 * t2 - (A + 3.0) * t2 * t2 + 1.0;
    k.w = 1.0 - k.x - k.y - k.z;
    return k;
}

void invoke(int ox, int oy, int ch) {
    int point = oy * p.outw + ox;
    float gx, gy;
    if (permute_fusion == 1) {
        gx = float(grid[point]);
        gy = float(grid[p.outw * p.outh + point]);
    } else {
        gx = float(grid[point * 2]);
        gy = float(grid[point * 2 + 1]);
    }
    float sx = unnormalize(gx, p.w);
    float sy = unnormalize(gy, p.h);
    int plane = ch * p.w * p.h;
    float v;
    if (sample_type == 3) {
        float x1 = floor(sx), y1 = floor(sy);
        vec4 kx = cubic(sx - x1), ky = cubic(sy - y1);
        ivec4 xs = ivec4(fold(x1 - 1.0, p.w), fold(x1, p.w), fold(x1 + 1.0, p.w),
                         fold(x1 + 2.0, p.w));
        ivec4 ys = ivec4(fold(y1 - 1.0, p.h), fold(y1, p.h), fold(y1 + 1.0, p.h),
                         fold(y1 + 2.0, p.h));
        v = 0.0;
        for (int j = 0; j < 4; j++) {
            float row = at(plane, xs.x, ys[j]) * kx.x + at(plane, xs.y, ys[j]) * kx.y
                      + at(plane, xs.z, ys[j]) * kx.z + at(plane, xs.w, ys[j]) * kx.w;
            v += row * ky[j];
        }
    } else {
        sx = fold(sx, p.w);
        sy = fold(sy, p.h);
        if (sample_type == 2) {
            v = at(plane, int(floor(sx + 0.5)), int(floor(sy + 0.5)));
        } else {
            float x0 = floor(sx), y0 = floor(sy);
            float alpha = sx - x0, beta = sy - y0;
            int ix = int(x0), iy = int(y0);
            float top = at(plane, ix, iy) * (1.0 - alpha) + at(plane, ix + 1, iy) * alpha;
            float bottom = at(plane, ix, iy + 1) * (1.0 - alpha) + at(plane, ix + 1, iy + 1) * alpha;
            v = top * (1.0 - beta) + bottom * beta;
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
