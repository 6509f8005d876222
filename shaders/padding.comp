#version 450
// Padding of a (c, h, w) blob: 0 constant, 1 replicate, 2 reflect. front/behind pad channels.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int type = 0;
layout(constant_id = 1) const float value = 0.0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params {
    int w; int h; int c;
    int outw; int outh; int outc;
    int left; int top; int front;
} p;

#include "index.h"

int fold(int i, int n) {
    if (type == 1) return clamp(i, 0, n - 1);
    // reflect without repeating the edge: -1 -> 1, n -> n - 2
    if (n == 1) return 0;
    int period = 2 * (n - 1);
    int m = i % period;
    if (m < 0) m += period;
    return m < n ? m : period - m;
}

void invoke(int ox, int oy, int oc) {
    if (ox >= p.outw || oy >= p.outh || oc >= p.outc) return;
    int x = ox - p.left;
    int y = oy - p.top;
    int c = oc - p.front;
    float v;
    bool inside = x >= 0 && x < p.w && y >= 0 && y < p.h && c >= 0 && c < p.c;
    if (inside) {
        v = float(x_in[(c * p.h + y) * p.w + x]);
    } else if (type == 0) {
        v = value;
    } else {
        v = float(x_in[(fold(c, p.c) * p.h + fold(y, p.h)) * p.w + fold(x, p.w)]);
    }
    x_out[(oc * p.outh + oy) * p.outw + ox] = sfp(v);
}

void main() {
    ivec3 id = ivec3(gl_GlobalInvocationID);
    ivec3 stride = grid_stride();
    for (int z = id.z; z < p.outc; z += stride.z)
        for (int y = id.y; y < p.outh; y += stride.y)
            for (int x = id.x; x < p.outw; x += stride.x) invoke(x, y, z);
}
