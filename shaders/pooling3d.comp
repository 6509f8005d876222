#version 450
// Pooling3D: max / average over (d, h, w) windows of a flat (c, d, h, w) blob, one output per
// invocation. Windowed pooling reads padded coordinates (input = padded - lead); global pooling
// is one window, the whole input. The host says which taps an average counts: those inside
// [lo, hi) per axis, in padded coordinates (ncnn counts from its *param* pads; with
// count_include_pad, the whole padded blob); padding reads 0. No tap counted gives NaN (0 / 0).
// Adaptive pooling's bins are [floor(i n / out), ceil((i + 1) n / out)), averaged as ncnn's
// sum / hk / wk / dk. Max pooling is ncnn's fold: max = the window's first value (-FLT_MAX
// where that is padding), then max = std::max(max, v) over every tap, padding included.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int pooling_type = 0;  // 0 max, 1 avg
layout(constant_id = 1) const int adaptive = 0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params {
    int w; int h; int d; int c;
    int outw; int outh; int outd;
    int kernel_w; int kernel_h; int kernel_d;
    int stride_w; int stride_h; int stride_d;
    int lead_w; int lead_h; int lead_d;
    int lo_w; int hi_w; int lo_h; int hi_h; int lo_d; int hi_d;
} p;

#include "std_minmax.h"
#include "index.h"

const float PAD_MAX = -3.402823466e+38;

// The input at padded coordinates (z, y, x) of channel base ``base``, or ``pad`` outside it.
float at(int base, int z, int y, int x, float pad) {
    z -= p.lead_d;
    y -= p.lead_h;
    x -= p.lead_w;
    bool inside = z >= 0 && z < p.d && y >= 0 && y < p.h && x >= 0 && x < p.w;
    return inside ? float(x_in[base + (z * p.h + y) * p.w + x]) : pad;
}

float adaptive_pool(int base, int oz, int oy, int ox) {
    int z0 = oz * p.d / p.outd, z1 = ((oz + 1) * p.d + p.outd - 1) / p.outd;
    int y0 = oy * p.h / p.outh, y1 = ((oy + 1) * p.h + p.outh - 1) / p.outh;
    int x0 = ox * p.w / p.outw, x1 = ((ox + 1) * p.w + p.outw - 1) / p.outw;
    float acc = pooling_type == 0 ? float(x_in[base + (z0 * p.h + y0) * p.w + x0]) : 0.0;
    for (int z = z0; z < z1; z++)
        for (int y = y0; y < y1; y++)
            for (int x = x0; x < x1; x++) {
                float v = float(x_in[base + (z * p.h + y) * p.w + x]);
                acc = pooling_type == 0 ? std_max(acc, v) : acc + v;
            }
    if (pooling_type == 1) acc = acc / float(y1 - y0) / float(x1 - x0) / float(z1 - z0);
    return acc;
}

float window_pool(int base, int oz, int oy, int ox) {
    int z0 = oz * p.stride_d, y0 = oy * p.stride_h, x0 = ox * p.stride_w;
    if (pooling_type == 0) {
        float acc = at(base, z0, y0, x0, PAD_MAX);
        for (int z = z0; z < z0 + p.kernel_d; z++)
            for (int y = y0; y < y0 + p.kernel_h; y++)
                for (int x = x0; x < x0 + p.kernel_w; x++)
                    acc = std_max(acc, at(base, z, y, x, PAD_MAX));
        return acc;
    }
    float sum = 0.0;
    int area = 0;
    for (int z = max(z0, p.lo_d); z < min(z0 + p.kernel_d, p.hi_d); z++)
        for (int y = max(y0, p.lo_h); y < min(y0 + p.kernel_h, p.hi_h); y++)
            for (int x = max(x0, p.lo_w); x < min(x0 + p.kernel_w, p.hi_w); x++) {
                sum += at(base, z, y, x, 0.0);
                area++;
            }
    return area > 0 ? sum / float(area) : uintBitsToFloat(0x7fc00000u);
}

void main() {
    int i = global_index_1d();
    int plane = p.outw * p.outh;
    int volume = plane * p.outd;
    if (i >= volume * p.c) return;
    int base = (i / volume) * p.d * p.h * p.w;
    int oz = (i % volume) / plane;
    int oy = (i % plane) / p.outw;
    int ox = i % p.outw;
    float v = adaptive == 1 ? adaptive_pool(base, oz, oy, ox) : window_pool(base, oz, oy, ox);
    x_out[i] = sfp(v);
}
