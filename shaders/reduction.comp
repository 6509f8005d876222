#version 450
// Reduction over the middle of a blob viewed as (outer, len, inner), then times coeff.
//   0 sum 1 asum 2 sumsq 3 mean 4 max 5 min 6 prod 7 l1 8 l2 9 logsum 10 logsumexp
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int op = 0;
layout(constant_id = 1) const float coeff = 1.0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params { int outer; int len; int inner; } p;

// max and min fold ncnn's std::max(acc, v) from -FLT_MAX (std::min from FLT_MAX): NaN never
// enters the accumulator
#include "std_minmax.h"
#include "index.h"

void main() {
    int i = global_index_1d();
    if (i >= p.outer * p.inner) return;
    int o = i / p.inner;
    int k = i % p.inner;
    int base = o * p.len * p.inner + k;
    float acc = op == 4 ? -3.402823466e+38 : (op == 5 ? 3.402823466e+38 : (op == 6 ? 1.0 : 0.0));
    float m = -3.402823466e+38;
    if (op == 10) {
        for (int j = 0; j < p.len; j++) m = std_max(m, float(x_in[base + j * p.inner]));
    }
    for (int j = 0; j < p.len; j++) {
        float v = float(x_in[base + j * p.inner]);
        if (op == 0 || op == 3 || op == 9) acc += v;
        else if (op == 1 || op == 7) acc += abs(v);
        else if (op == 2 || op == 8) acc += v * v;
        else if (op == 4) acc = std_max(acc, v);
        else if (op == 5) acc = std_min(acc, v);
        else if (op == 6) acc *= v;
        else if (op == 10) acc += exp(v - m);
    }
    if (op == 3) acc /= float(p.len);
    else if (op == 8) acc = sqrt(acc);
    else if (op == 9) acc = log(acc);
    else if (op == 10) acc = log(acc) + m;
    x_out[i] = sfp(acc * coeff);
}
