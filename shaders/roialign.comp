#version 450
// ROIAlign of one ROI (the first 4 values of rois: x1, y1, x2, y2) over a feature map whose
// channels hold `plane` values each, as ncnn's x86 roialign computes it and as the numpy
// reference (asyncvk/layers/_roi_align.py) does: one invocation per output value. Version 0
// clips each bin to the map and reads `row * w + col` in the channel even past a row (0 past
// the channel); version 1 (detectron2) skips samples off the map and searches for the samples
// on it, so a huge ROI costs what its part on the map costs. Every float expression that
// decides a sample or its weight is `precise`, so no fused multiply-add moves a sample.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int version = 0;
layout(constant_id = 1) const int aligned = 0;
layout(constant_id = 2) const int sampling_ratio = 0;  // 0: adaptive

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) readonly buffer Rois { sfp rois[]; };
layout(binding = 2) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params {
    int w; int h; int plane; int c; int outw; int outh; float scale;
} p;

#include "index.h"
#include "std_minmax.h"

const float LIMIT = 16777216.0;  // scaled corners are clamped to +-2**24

float corner(int i) {
    precise float v = float(rois[i]) * p.scale;
    if (is_nan(v)) return v;
    v = v < -LIMIT ? -LIMIT : (LIMIT < v ? LIMIT : v);
    precise float moved = v - 0.5;
    return aligned == 1 ? moved : v;
}

float sample_at(float start, float bin_size, int grid, int s) {
    precise float half_step = (float(s) + 0.5) * bin_size;
    precise float at = start + half_step / float(grid);
    return at;
}

// The channel's value at row yi, column xi (both >= 0) as ncnn indexes it; 0 past the channel.
float pixel(int base, int yi, int xi) {
    if (yi >= p.plane / p.w) return 0.0;
    int index = yi * p.w + xi;
    return index < p.plane ? float(x_in[base + index]) : 0.0;
}

// The bilinear sum of one sample from its two taps per axis (ncnn's operand order).
float taps(int base, ivec2 ys, vec2 wy, ivec2 xs, vec2 wx) {
    precise float w1 = wy.x * wx.x;
    precise float w2 = wy.x * wx.y;
    precise float w3 = wy.y * wx.x;
    precise float w4 = wy.y * wx.y;
    precise float v = w1 * pixel(base, ys.x, xs.x) + w2 * pixel(base, ys.x, xs.y)
                    + w3 * pixel(base, ys.y, xs.x) + w4 * pixel(base, ys.y, xs.y);
    return v;
}

// Version 0's taps along one axis: (low, high) indexes and their weights.
void tap0(float at, int size, out ivec2 index, out vec2 weight) {
    int low = int(at);
    int high = low + 1;
    precise float w_low = float(high) - at;
    precise float w_high = at - float(low);
    if (high >= size) {
        high = size - 1;
        w_low = 1.0;
        w_high = 0.0;
    }
    index = ivec2(low, high);
    weight = vec2(w_low, w_high);
}

// Version 1's taps along one axis, for a sample already known to be in [-1, size].
void tap1(float at, int size, out ivec2 index, out vec2 weight) {
    float pos = at <= 0.0 ? 0.0 : at;
    int low = int(pos);
    int high = low + 1;
    if (low >= size - 1) {
        low = size - 1;
        high = low;
        pos = float(low);
    }
    precise float w_high = pos - float(low);
    precise float w_low = 1.0 - w_high;
    index = ivec2(low, high);
    weight = vec2(w_low, w_high);
}

// The first sample index in [0, grid] at or past `bound` (strict: past it), for increasing
// coordinates.
int first_from(float start, float bin_size, int grid, float bound, bool strict) {
    int lo = 0;
    int hi = grid;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        float at = sample_at(start, bin_size, grid, mid);
        if (strict ? at > bound : at >= bound) hi = mid; else lo = mid + 1;
    }
    return lo;
}

float version0(int base, float x1, float y1, float bin_w, float bin_h, int ox, int oy) {
    precise float hs = y1 + float(oy) * bin_h;
    precise float ws = x1 + float(ox) * bin_w;
    precise float he = y1 + float(oy + 1) * bin_h;
    precise float we = x1 + float(ox + 1) * bin_w;
    hs = min(max(hs, 0.0), float(p.h));
    ws = min(max(ws, 0.0), float(p.w));
    he = min(max(he, 0.0), float(p.h));
    we = min(max(we, 0.0), float(p.w));
    if (he <= hs || we <= ws) return 0.0;
    precise float extent_h = he - hs;
    precise float extent_w = we - ws;
    int grid_h = sampling_ratio > 0 ? sampling_ratio : int(ceil(extent_h));
    int grid_w = sampling_ratio > 0 ? sampling_ratio : int(ceil(extent_w));
    precise float sum = 0.0;
    for (int by = 0; by < grid_h; by++) {
        ivec2 ys;
        vec2 wy;
        tap0(sample_at(hs, bin_h, grid_h, by), p.h, ys, wy);
        for (int bx = 0; bx < grid_w; bx++) {
            ivec2 xs;
            vec2 wx;
            tap0(sample_at(ws, bin_w, grid_w, bx), p.w, xs, wx);
            sum = sum + taps(base, ys, wy, xs, wx);
        }
    }
    precise float area = float(grid_h * grid_w);
    return sum / area;
}

float version1(int base, float x1, float y1, float bin_w, float bin_h, int ox, int oy) {
    int grid_h = sampling_ratio > 0 ? sampling_ratio : int(ceil(bin_h));
    int grid_w = sampling_ratio > 0 ? sampling_ratio : int(ceil(bin_w));
    precise float count = grid_h > 0 && grid_w > 0 ? float(grid_h) * float(grid_w) : 1.0;
    precise float hs = y1 + float(oy) * bin_h;
    precise float ws = x1 + float(ox) * bin_w;
    int y_first = 0, y_stop = max(grid_h, 0), x_first = 0, x_stop = max(grid_w, 0);
    if (bin_h > 0.0 && grid_h > 0) {
        y_first = first_from(hs, bin_h, grid_h, -1.0, false);
        y_stop = first_from(hs, bin_h, grid_h, float(p.h), true);
    }
    if (bin_w > 0.0 && grid_w > 0) {
        x_first = first_from(ws, bin_w, grid_w, -1.0, false);
        x_stop = first_from(ws, bin_w, grid_w, float(p.w), true);
    }
    precise float sum = 0.0;
    for (int by = y_first; by < y_stop; by++) {
        float y = sample_at(hs, bin_h, grid_h, by);
        if (y < -1.0 || y > float(p.h)) continue;
        ivec2 ys;
        vec2 wy;
        tap1(y, p.h, ys, wy);
        for (int bx = x_first; bx < x_stop; bx++) {
            float x = sample_at(ws, bin_w, grid_w, bx);
            if (x < -1.0 || x > float(p.w)) continue;
            ivec2 xs;
            vec2 wx;
            tap1(x, p.w, xs, wx);
            sum = sum + taps(base, ys, wy, xs, wx);
        }
    }
    return sum / count;
}

void main() {
    int gi = global_index_1d();
    if (gi >= p.c * p.outh * p.outw) return;
    int ox = gi % p.outw;
    int oy = (gi / p.outw) % p.outh;
    int q = gi / (p.outw * p.outh);
    float x1 = corner(0), y1 = corner(1), x2 = corner(2), y2 = corner(3);
    if (is_nan(x1) || is_nan(y1) || is_nan(x2) || is_nan(y2)) {
        x_out[gi] = sfp(uintBitsToFloat(0x7fc00000u));
        return;
    }
    precise float roi_w = x2 - x1;
    precise float roi_h = y2 - y1;
    if (aligned == 0) {
        roi_w = roi_w < 1.0 ? 1.0 : roi_w;
        roi_h = roi_h < 1.0 ? 1.0 : roi_h;
    }
    precise float bin_w = roi_w / float(p.outw);
    precise float bin_h = roi_h / float(p.outh);
    int base = q * p.plane;
    float v = version == 0 ? version0(base, x1, y1, bin_w, bin_h, ox, oy)
                           : version1(base, x1, y1, bin_w, bin_h, ox, oy);
    x_out[gi] = sfp(v);
}
