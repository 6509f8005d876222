#version 450
// ROIPooling (mode 0: max over each bin of the ROI rounded to whole pixels) and PSROIPooling
// (mode 1: the average over each bin of its own input channel) of one ROI (the first 4 values
// of rois) over a feature map whose channels hold `plane` values each, as ncnn's roipooling
// and psroipooling compute them and as asyncvk/layers/pooling_roi.py's numpy reference does:
// one invocation per output value, the bin's values visited row by row from its first. Bins are
// clipped to the map; an empty bin gives 0; a NaN corner NaN everywhere; scaled corners are
// clamped to +-2**24.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int mode = 0;  // 0 ROIPooling, 1 PSROIPooling

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) readonly buffer Rois { sfp rois[]; };
layout(binding = 2) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params {
    int w; int h; int plane; int c; int outw; int outh; float scale;
} p;

#include "index.h"
#include "std_minmax.h"

const float LIMIT = 16777216.0;

// C's roundf: half away from zero (v - trunc(v) is exact).
float round_away(float v) {
    float whole = trunc(v);
    precise float frac = v - whole;
    return abs(frac) >= 0.5 ? whole + sign(v) : whole;
}

float clamp_corner(float v) {
    return is_nan(v) ? v : (v < -LIMIT ? -LIMIT : (LIMIT < v ? LIMIT : v));
}

// ROIPooling's corner i: round(roi * scale) (a whole number).
float pooling_corner(int i) {
    precise float v = float(rois[i]) * p.scale;
    return round_away(clamp_corner(v));
}

// PSROIPooling's corner i: roundf(roi) * scale, the far corners (i >= 2) a pixel further out.
float ps_corner(int i) {
    precise float v = float(rois[i]) + (i >= 2 ? 1.0 : 0.0);
    precise float scaled = round_away(v) * p.scale;
    return clamp_corner(scaled);
}

void main() {
    int gi = global_index_1d();
    if (gi >= p.c * p.outh * p.outw) return;
    int ox = gi % p.outw;
    int oy = (gi / p.outw) % p.outh;
    int q = gi / (p.outw * p.outh);
    float x1, y1, x2, y2;
    if (mode == 0) {
        x1 = pooling_corner(0); y1 = pooling_corner(1);
        x2 = pooling_corner(2); y2 = pooling_corner(3);
    } else {
        x1 = ps_corner(0); y1 = ps_corner(1); x2 = ps_corner(2); y2 = ps_corner(3);
    }
    if (is_nan(x1) || is_nan(y1) || is_nan(x2) || is_nan(y2)) {
        x_out[gi] = sfp(uintBitsToFloat(0x7fc00000u));
        return;
    }
    int hs, ws, he, we, channel;
    if (mode == 0) {
        int ix1 = int(x1), iy1 = int(y1);
        precise float bin_w = float(max(int(x2) - ix1 + 1, 1)) / float(p.outw);
        precise float bin_h = float(max(int(y2) - iy1 + 1, 1)) / float(p.outh);
        precise float hs_f = float(iy1) + floor(float(oy) * bin_h);
        precise float ws_f = float(ix1) + floor(float(ox) * bin_w);
        precise float he_f = float(iy1) + ceil(float(oy + 1) * bin_h);
        precise float we_f = float(ix1) + ceil(float(ox + 1) * bin_w);
        hs = int(hs_f); ws = int(ws_f); he = int(he_f); we = int(we_f);
        channel = q;
    } else {
        precise float roi_w = x2 - x1;
        precise float roi_h = y2 - y1;
        roi_w = roi_w < 0.1 ? 0.1 : roi_w;
        roi_h = roi_h < 0.1 ? 0.1 : roi_h;
        precise float bin_w = roi_w / float(p.outw);
        precise float bin_h = roi_h / float(p.outh);
        precise float hs_f = y1 + float(oy) * bin_h;
        precise float ws_f = x1 + float(ox) * bin_w;
        precise float he_f = y1 + float(oy + 1) * bin_h;
        precise float we_f = x1 + float(ox + 1) * bin_w;
        hs = int(floor(hs_f)); ws = int(floor(ws_f)); he = int(ceil(he_f)); we = int(ceil(we_f));
        channel = (q * p.outh + oy) * p.outw + ox;
    }
    hs = clamp(hs, 0, p.h); ws = clamp(ws, 0, p.w);
    he = clamp(he, 0, p.h); we = clamp(we, 0, p.w);
    if (he <= hs || we <= ws) {
        x_out[gi] = sfp(0.0);
        return;
    }
    int base = channel * p.plane;
    float acc = mode == 0 ? float(x_in[base + hs * p.w + ws]) : 0.0;
    for (int y = hs; y < he; y++) {
        for (int x = ws; x < we; x++) {
            float v = float(x_in[base + y * p.w + x]);
            precise float added = acc + v;
            acc = mode == 0 ? std_max(acc, v) : added;
        }
    }
    precise float area = float((he - hs) * (we - ws));
    precise float mean = acc / area;
    x_out[gi] = sfp(mode == 0 ? acc : mean);
}
