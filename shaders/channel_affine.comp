#version 450
// out = in * scale[c] + bias[c] per channel (BatchNorm folded on the host, Scale, Bias, PReLU
// with mode 1). mode 0: affine; mode 1: prelu (x < 0 ? x * scale[c] : x).
// Channel of element i is (i / plane) % channels; 1-D blobs use plane 1.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int mode = 0;
layout(constant_id = 1) const int has_bias = 1;
layout(constant_id = 2) const int per_channel = 1;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Scale { sfp scale[]; };
layout(binding = 3) readonly buffer Bias { sfp bias[]; };

layout(push_constant) uniform Params { int n; int plane; int channels; } p;

#include "index.h"

void main() {
    int i = global_index_1d();
    if (i >= p.n) return;
    int c = per_channel == 1 ? (i / p.plane) % p.channels : 0;
    float x = float(x_in[i]);
    float s = float(scale[c]);
    float v;
    if (mode == 1) v = x < 0.0 ? x * s : x;
    else v = x * s + (has_bias == 1 ? float(bias[c]) : 0.0);
    x_out[i] = sfp(v);
}
