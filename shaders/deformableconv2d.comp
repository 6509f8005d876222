#version 450
// DeformableConv2D (modulated, v2 with a mask), as ncnn's deformableconv2d.cpp: one invocation
// computes one output value; x, y = output column and row, z = output channel. Tap (i, j) of
// the kernel samples the input at (oy * stride_h - pad_top + i * dilation_h + dy,
// ox * stride_w - pad_left + j * dilation_w + dx), where offset channel 2 * (i * kernel_w + j)
// holds dy and the next one dx; bilinear, corners outside the image read 0, and a point with
// y <= -1, x <= -1, y >= h or x >= w reads 0 altogether. The mask's channel i * kernel_w + j
// scales the sample. Weights are [out_c][in_c][kernel_h][kernel_w] (ncnn's order).
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int kernel_w = 1;
layout(constant_id = 1) const int kernel_h = 1;
layout(constant_id = 2) const int dilation_w = 1;
layout(constant_id = 3) const int dilation_h = 1;
layout(constant_id = 4) const int stride_w = 1;
layout(constant_id = 5) const int stride_h = 1;
layout(constant_id = 6) const int bias_term = 0;
layout(constant_id = 7) const int act_type = 0;
layout(constant_id = 8) const float act_a = 0.0;
layout(constant_id = 9) const float act_b = 0.0;
layout(constant_id = 10) const int has_mask = 0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) readonly buffer Offset { sfp offset[]; };
layout(binding = 2) readonly buffer Mask { sfp mask[]; };  // the offset again without a mask
layout(binding = 3) writeonly buffer Out { sfp x_out[]; };
layout(binding = 4) readonly buffer Weight { sfp weight[]; };
layout(binding = 5) readonly buffer Bias { sfp bias[]; };

layout(push_constant) uniform Params {
    int w; int h; int c;
    int outw; int outh; int outc;
    int pad_left; int pad_top;
} p;

#include "std_minmax.h"
#include "index.h"
#include "activation.h"

void invoke(int ox, int oy, int oc) {
    int plane = p.outw * p.outh;
    int pixel = oy * p.outw + ox;
    int in_plane = p.w * p.h;
    int maxk = kernel_w * kernel_h;
    int y_origin = oy * stride_h - p.pad_top;
    int x_origin = ox * stride_w - p.pad_left;
    float sum = bias_term == 1 ? float(bias[oc]) : 0.0;
    for (int i = 0; i < kernel_h; i++) {
        for (int j = 0; j < kernel_w; j++) {
            int tap = i * kernel_w + j;
            float dy = float(offset[(tap * 2) * plane + pixel]);
            float dx = float(offset[(tap * 2 + 1) * plane + pixel]);
            float y = float(y_origin + i * dilation_h) + dy;
            float x = float(x_origin + j * dilation_w) + dx;
            if (!(y > -1.0 && x > -1.0 && y < float(p.h) && x < float(p.w))) continue;
            float m = has_mask == 1 ? float(mask[tap * plane + pixel]) : 1.0;
            int y0 = int(floor(y));
            int x0 = int(floor(x));
            float ly = y - float(y0);
            float lx = x - float(x0);
            float hy = 1.0 - ly;
            float hx = 1.0 - lx;
            float w1 = hy * hx, w2 = hy * lx, w3 = ly * hx, w4 = ly * lx;
            bool top = y0 >= 0, bottom = y0 + 1 <= p.h - 1;
            bool left = x0 >= 0, right = x0 + 1 <= p.w - 1;
            // the corners' indexes clamped inside the image, so no load strays outside
            int ya = max(y0, 0) * p.w, yb = min(y0 + 1, p.h - 1) * p.w;
            int xa = max(x0, 0), xb = min(x0 + 1, p.w - 1);
            int wrow = oc * p.c * maxk + tap;
            for (int ic = 0; ic < p.c; ic++) {
                int base = ic * in_plane;
                float v1 = top && left ? float(x_in[base + ya + xa]) : 0.0;
                float v2 = top && right ? float(x_in[base + ya + xb]) : 0.0;
                float v3 = bottom && left ? float(x_in[base + yb + xa]) : 0.0;
                float v4 = bottom && right ? float(x_in[base + yb + xb]) : 0.0;
                float v = w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4;
                sum += v * m * float(weight[wrow + ic * maxk]);
            }
        }
    }
    x_out[oc * plane + pixel] = sfp(activation(sum, act_type, act_a, act_b));
}

void main() {
    ivec3 id = ivec3(gl_GlobalInvocationID);
    ivec3 stride = grid_stride();
    for (int z = id.z; z < p.outc; z += stride.z)
        for (int y = id.y; y < p.outh; y += stride.y)
            for (int x = id.x; x < p.outw; x += stride.x) invoke(x, y, z);
}
