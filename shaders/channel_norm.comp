#version 450
// Normalize and MVN (asyncvk/layers/norms_more.py) on a blob viewed as (c, size), c ncnn's
// channels. The layer dispatches the stages it needs in turn, with barriers between them:
//   stage 0, a workgroup per channel (a workgroup takes q, q + groups, ... past the groups):
//     sums[q] = the sum over channel q of (x - center[q]) (center read only with centered),
//     squared with square;
//   stage 1, one workgroup: each channel's center and multiplier from sums[q], or from their
//     total with across. formula 0 (Normalize): center 0, mul = a(sum) * scale, a by eps_mode
//     (0: 1 / sqrt(s + eps), 1: 1 / max(sqrt(s), eps), 2: 1 / sqrt(max(s, eps)), std::max as
//     ncnn's C); formula 1 (MVN mean): center = s / count, mul 1; formula 2 (MVN variance):
//     mul = 1 / (sqrt(s / count) + eps), count = size, or c * size with across;
//   stage 2, an invocation per element: out = (x - center[q]) * mul[q];
//   stage 3, an invocation per position i (Normalize across channels only): the sum of x^2
//     over the channels at i, a(sum), then out = x * (a * scale[0]) with shared_scale, else
//     x * a * scale[q].
// stats holds sums, center and mul, c floats each (stage 3 reads none of it). Stages 0 and 1
// take a power-of-two local size of at most LINE_LOCAL (line_reduce.h).
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int stage = 0;
layout(constant_id = 1) const int square = 0;
layout(constant_id = 2) const int centered = 0;
layout(constant_id = 3) const int formula = 0;
layout(constant_id = 4) const int across = 0;
layout(constant_id = 5) const int eps_mode = 0;
layout(constant_id = 6) const int shared_scale = 0;
layout(constant_id = 7) const float eps = 0.0001;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Scale { sfp scale[]; };
layout(binding = 3) buffer Stats { float stats[]; };

layout(push_constant) uniform Params { int c; int size; } p;

#include "std_minmax.h"
#include "index.h"
#include "line_reduce.h"

float inverse_norm(float s) {
    if (eps_mode == 0) return 1.0 / sqrt(s + eps);
    if (eps_mode == 1) return 1.0 / std_max(sqrt(s), eps);
    return 1.0 / sqrt(std_max(s, eps));
}

void reduce_channels() {
    int n = int(gl_WorkGroupSize.x);
    for (int q = int(gl_WorkGroupID.x); q < p.c; q += int(gl_NumWorkGroups.x)) {
        float center = centered == 1 ? stats[p.c + q] : 0.0;
        int base = q * p.size;
        float acc = 0.0;
        for (int i = int(gl_LocalInvocationID.x); i < p.size; i += n) {
            float v = float(x_in[base + i]) - center;
            acc += square == 1 ? v * v : v;
        }
        acc = line_sum(acc);
        if (gl_LocalInvocationID.x == 0) stats[q] = acc;
    }
}

void finish_channels() {
    int n = int(gl_WorkGroupSize.x);
    int t = int(gl_LocalInvocationID.x);
    float total = 0.0;
    if (across == 1) {
        float part = 0.0;
        for (int q = t; q < p.c; q += n) part += stats[q];
        total = line_sum(part);
    }
    float count = across == 1 ? float(p.c * p.size) : float(p.size);
    for (int q = t; q < p.c; q += n) {
        float s = across == 1 ? total : stats[q];
        if (formula == 0) {
            stats[p.c + q] = 0.0;
            stats[2 * p.c + q] = inverse_norm(s) * float(scale[shared_scale == 1 ? 0 : q]);
        } else if (formula == 1) {
            stats[p.c + q] = s / count;
            stats[2 * p.c + q] = 1.0;
        } else {
            stats[2 * p.c + q] = 1.0 / (sqrt(s / count) + eps);
        }
    }
}

void apply_channels() {
    int i = global_index_1d();
    if (i >= p.c * p.size) return;
    int q = i / p.size;
    x_out[i] = sfp((float(x_in[i]) - stats[p.c + q]) * stats[2 * p.c + q]);
}

void normalize_positions() {
    int i = global_index_1d();
    if (i >= p.size) return;
    float s = 0.0;
    for (int q = 0; q < p.c; q++) {
        float v = float(x_in[q * p.size + i]);
        s += v * v;
    }
    float a = inverse_norm(s);
    if (shared_scale == 1) {
        float k = a * float(scale[0]);
        for (int q = 0; q < p.c; q++) {
            x_out[q * p.size + i] = sfp(float(x_in[q * p.size + i]) * k);
        }
    } else {
        for (int q = 0; q < p.c; q++) {
            x_out[q * p.size + i] = sfp(float(x_in[q * p.size + i]) * a * float(scale[q]));
        }
    }
}

void main() {
    if (stage == 0) reduce_channels();
    else if (stage == 1) finish_channels();
    else if (stage == 2) apply_channels();
    else normalize_positions();
}
