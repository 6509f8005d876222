#version 450
// Direct convolution for group == 1, tiled for memory-bound devices: one invocation computes
// 8 output channels at 8 consecutive output columns. Each input value feeds 8 channels and each
// weight vec4 8 columns, so a multiply-add costs 0.25 scalar loads instead of convolution.comp's
// 2 (llvmpipe runs every per-lane load as a scalar loop). 8 columns rather than 4 (0.375 loads)
// took cunet's convolutions 20-27% less time on lavapipe, spilled accumulators included.
// Weights are repacked by the layer as [out_c / 8][in_c][kernel_h * kernel_w][8] (zero-padded
// channels), read as two vec4 loads.
// x = the 8-column block, row-major over the output map (x = row * blocks per row + block),
// z = output channel / 8. llvmpipe runs the invocations of a workgroup 8 at a time along x, so a
// flat x keeps every lane busy on a 7x7 map (an 8x8 workgroup of columns x rows used 2 of 8).
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int kernel_w = 1;
layout(constant_id = 1) const int kernel_h = 1;
layout(constant_id = 2) const int dilation_w = 1;
layout(constant_id = 3) const int dilation_h = 1;
layout(constant_id = 4) const int stride_w = 1;
layout(constant_id = 5) const int stride_h = 1;
layout(constant_id = 7) const int bias_term = 0;
layout(constant_id = 8) const int act_type = 0;
layout(constant_id = 9) const float act_a = 0.0;
layout(constant_id = 10) const float act_b = 0.0;
layout(constant_id = 11) const float pad_value = 0.0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Weight { sfpvec4 weight[]; };
layout(binding = 3) readonly buffer Bias { sfp bias[]; };

layout(push_constant) uniform Params {
    int w; int h; int c;
    int outw; int outh; int outc;
    int pad_left; int pad_top;
} p;

#include "std_minmax.h"
#include "activation.h"
#include "index.h"

// one block of 8 columns (tx) by 8 output channels (tz)
void invoke(int tx, int oy, int tz) {
    int ox0 = tx * 8;
    int oc0 = tz * 8;
    if (ox0 >= p.outw || oy >= p.outh || oc0 >= p.outc) return;

    const int maxk = kernel_w * kernel_h;
    vec4 a[8];  // [column] channels 0-3
    vec4 b[8];  // [column] channels 4-7
    for (int j = 0; j < 8; j++) { a[j] = vec4(0.0); b[j] = vec4(0.0); }
    int y0 = oy * stride_h - p.pad_top;
    ivec4 xs = (ivec4(ox0) + ivec4(0, 1, 2, 3)) * stride_w - p.pad_left;
    ivec4 xs2 = xs + 4 * stride_w;
    int wv = tz * p.c * maxk * 2;
    int plane_size = p.w * p.h;
    for (int ic = 0; ic < p.c; ic++) {
        int plane = ic * plane_size;
        for (int ky = 0; ky < kernel_h; ky++) {
            int y = y0 + ky * dilation_h;
            bool yin = y >= 0 && y < p.h;
            int row = plane + clamp(y, 0, p.h - 1) * p.w;
            for (int kx = 0; kx < kernel_w; kx++) {
                ivec4 x = xs + kx * dilation_w;
                ivec4 x2 = xs2 + kx * dilation_w;
                // branch-free edges: clamp the index, then replace the value by pad_value
                bvec4 ok = bvec4(yin && x.x >= 0 && x.x < p.w, yin && x.y >= 0 && x.y < p.w,
                                 yin && x.z >= 0 && x.z < p.w, yin && x.w >= 0 && x.w < p.w);
                bvec4 ok2 = bvec4(yin && x2.x >= 0 && x2.x < p.w, yin && x2.y >= 0 && x2.y < p.w,
                                  yin && x2.z >= 0 && x2.z < p.w, yin && x2.w >= 0 && x2.w < p.w);
                ivec4 xc = clamp(x, ivec4(0), ivec4(p.w - 1));
                ivec4 xc2 = clamp(x2, ivec4(0), ivec4(p.w - 1));
                vec4 v = vec4(float(x_in[row + xc.x]), float(x_in[row + xc.y]),
                              float(x_in[row + xc.z]), float(x_in[row + xc.w]));
                vec4 v2 = vec4(float(x_in[row + xc2.x]), float(x_in[row + xc2.y]),
                               float(x_in[row + xc2.z]), float(x_in[row + xc2.w]));
                v = mix(vec4(pad_value), v, ok);
                v2 = mix(vec4(pad_value), v2, ok2);
                vec4 wa = vec4(weight[wv]);
                vec4 wb = vec4(weight[wv + 1]);
                wv += 2;
                a[0] += v.x * wa; b[0] += v.x * wb;
                a[1] += v.y * wa; b[1] += v.y * wb;
                a[2] += v.z * wa; b[2] += v.z * wb;
                a[3] += v.w * wa; b[3] += v.w * wb;
                a[4] += v2.x * wa; b[4] += v2.x * wb;
                a[5] += v2.y * wa; b[5] += v2.y * wb;
                a[6] += v2.z * wa; b[6] += v2.z * wb;
                a[7] += v2.w * wa; b[7] += v2.w * wb;
            }
        }
    }
    for (int i = 0; i < 8; i++) {
        int oc = oc0 + i;
        if (oc >= p.outc) break;
        float bv = bias_term == 1 ? float(bias[oc]) : 0.0;
        int base = (oc * p.outh + oy) * p.outw;
        for (int j = 0; j < 8; j++) {
            if (ox0 + j >= p.outw) break;
            float s = i < 4 ? a[j][i] : b[j][i - 4];
            x_out[base + ox0 + j] = sfp(activation(s + bv, act_type, act_a, act_b));
        }
    }
}

void main() {
    ivec3 id = ivec3(gl_GlobalInvocationID);
    ivec3 stride = grid_stride();
    int blocks = (p.outw + 7) / 8;  // TILE_OX in asyncvk/layers/_conv_shaders.py
    for (int z = id.z; z < (p.outc + 7) / 8; z += stride.z)
        for (int i = id.x; i < blocks * p.outh; i += stride.x) invoke(i % blocks, i / blocks, z);
}
