#version 450
// LRN, one invocation per element of a (c, h, w) blob (x: pixel, z: channel):
// out = x * (bias + alpha_div_size * ss)^-beta, ss the sum of squares over the window.
// Across channels (region_type 0) the window is the local_size channels from q - local_size/2
// that exist (as the ncnn wheel: older ncnn sources took one more for an even local_size);
// within a channel (1) it is local_size^2 pixels starting local_size/2 up and left, outside
// pixels counting as 0. Squares are added in ncnn's order (channel by channel; row by row) so
// the sums round as ncnn's do.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int region_type = 0;
layout(constant_id = 1) const int local_size = 5;
layout(constant_id = 2) const float alpha_div_size = 0.2;
layout(constant_id = 3) const float beta = 0.75;
layout(constant_id = 4) const float bias = 1.0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params { int w; int h; int c; } p;

#include "index.h"

void invoke(int yx, int q) {
    int plane = p.w * p.h;
    if (yx >= plane || q >= p.c) return;
    int i = q * plane + yx;
    float ss = 0.0;
    if (region_type == 0) {
        int first = max(q - local_size / 2, 0);
        int last = min(q - local_size / 2 + local_size - 1, p.c - 1);
        for (int ch = first; ch <= last; ch++) {
            float v = float(x_in[ch * plane + yx]);
            ss += v * v;
        }
    } else {
        int y0 = yx / p.w - local_size / 2;
        int x0 = yx % p.w - local_size / 2;
        for (int ky = max(y0, 0); ky < min(y0 + local_size, p.h); ky++) {
            for (int kx = max(x0, 0); kx < min(x0 + local_size, p.w); kx++) {
                float v = float(x_in[q * plane + ky * p.w + kx]);
                ss += v * v;
            }
        }
    }
    float x = float(x_in[i]);
    x_out[i] = sfp(x * pow(bias + alpha_div_size * ss, -beta));
}

// pixels: a folded 1-D dispatch over x and y; channels: z, looping when the host caps it
void main() {
    int yx = global_index_1d();
    for (int q = int(gl_GlobalInvocationID.z); q < p.c; q += grid_stride().z) invoke(yx, q);
}
