#version 450
// Fold (col2im): each output value is the sum of the Unfold columns whose windows cover it,
// added from 0 in ncnn's order (kernel row u, then column v), so the sums match ncnn's loop.
// Column (ch, u, v) holds, for window (iy, ix), the value at padded pixel
// (iy * stride_h + u * dilation_h, ix * stride_w + v * dilation_w); pads are cut off here.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params {
    int n; int outw; int outh; int inw; int inh;
    int kernel_w; int kernel_h; int dilation_w; int dilation_h;
    int stride_w; int stride_h; int pad_left; int pad_top;
} p;

#include "index.h"

void main() {
    int i = global_index_1d();
    if (i >= p.n) return;
    int plane = p.outw * p.outh;
    int ch = i / plane;
    int y = (i % plane) / p.outw + p.pad_top;  // in the padded output
    int x = i % p.outw + p.pad_left;
    int first = ch * p.kernel_h * p.kernel_w;
    float acc = 0.0;
    for (int u = 0; u < p.kernel_h; u++) {
        int ty = y - u * p.dilation_h;
        if (ty < 0 || ty % p.stride_h != 0 || ty / p.stride_h >= p.inh) continue;
        int row = (first + u * p.kernel_w) * p.inh + ty / p.stride_h;
        for (int v = 0; v < p.kernel_w; v++) {
            int tx = x - v * p.dilation_w;
            if (tx < 0 || tx % p.stride_w != 0 || tx / p.stride_w >= p.inw) continue;
            acc += float(x_in[(row + v * p.inh) * p.inw + tx / p.stride_w]);
        }
    }
    x_out[i] = sfp(acc);
}
