#version 450
// Max / average pooling, global and adaptive included. Sizes, kernel, stride and pads are push
// constants (global pooling's kernel is the input size), so pooling layers of one type share a
// pipeline. Average pooling divides by the real pixels in the window, or with
// count_include_pad by the whole kernel area, as ncnn does (pads read as nothing).
// Max pooling is ncnn's fold: max = the window's first value (-FLT_MAX where that is padding),
// then max = std::max(max, v) over the window, padding included: a NaN comes out only when it
// is the window's first value.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int pooling_type = 0;  // 0 max, 1 avg
layout(constant_id = 1) const int count_include_pad = 0;
layout(constant_id = 2) const int adaptive = 0;
// CPU devices: outputs laid out flat along x (column, then row, then channel). llvmpipe runs a
// workgroup's invocations 8 at a time along x; an 8 x 8 workgroup per channel of a global
// pooling kept 1 of 64 busy (efficientnet_b0's 1152-channel layer: 7 ms on lavapipe).
layout(constant_id = 3) const int flat_outputs = 0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params {
    int w; int h; int c;
    int outw; int outh;
    int kernel_w; int kernel_h;
    int stride_w; int stride_h;
    int pad_left; int pad_top; int pad_right; int pad_bottom;
} p;

#include "std_minmax.h"
#include "index.h"

void invoke(int ox, int oy, int ch) {
    if (ox >= p.outw || oy >= p.outh || ch >= p.c) return;

    int x0, x1, y0, y1;
    if (adaptive == 1) {
        x0 = (ox * p.w) / p.outw;
        x1 = ((ox + 1) * p.w + p.outw - 1) / p.outw;
        y0 = (oy * p.h) / p.outh;
        y1 = ((oy + 1) * p.h + p.outh - 1) / p.outh;
    } else {
        x0 = ox * p.stride_w - p.pad_left;
        y0 = oy * p.stride_h - p.pad_top;
        x1 = x0 + p.kernel_w;
        y1 = y0 + p.kernel_h;
    }
    int plane = ch * p.w * p.h;
    const float pad = -3.402823466e+38;
    float acc = 0.0;
    if (pooling_type == 0) {
        bool first_inside = y0 >= 0 && y0 < p.h && x0 >= 0 && x0 < p.w;
        acc = first_inside ? float(x_in[plane + y0 * p.w + x0]) : pad;
        bool padded = y0 < 0 || x0 < 0 || y1 > p.h || x1 > p.w;
        if (padded) acc = std_max(acc, pad);
    }
    int count = 0;
    for (int y = max(y0, 0); y < min(y1, p.h); y++) {
        for (int x = max(x0, 0); x < min(x1, p.w); x++) {
            float v = float(x_in[plane + y * p.w + x]);
            if (pooling_type == 0) acc = std_max(acc, v); else acc += v;
            count++;
        }
    }
    if (pooling_type == 1) {
        if (adaptive == 0 && count_include_pad == 1) count = p.kernel_w * p.kernel_h;
        acc = count > 0 ? acc / float(count) : 0.0;
    }
    x_out[(ch * p.outh + oy) * p.outw + ox] = sfp(acc);
}

void main() {
    ivec3 id = ivec3(gl_GlobalInvocationID);
    ivec3 stride = grid_stride();
    if (flat_outputs == 1) {
        int plane = p.outw * p.outh;
        for (int i = id.x; i < plane * p.c; i += stride.x)
            invoke(i % p.outw, (i % plane) / p.outw, i / plane);
        return;
    }
    for (int z = id.z; z < p.c; z += stride.z)
        for (int y = id.y; y < p.outh; y += stride.y)
            for (int x = id.x; x < p.outw; x += stride.x) invoke(x, y, z);
}
