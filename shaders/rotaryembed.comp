#version 450
// ncnn's RotaryEmbed (asyncvk/layers/rotary.py): one invocation per output value. x is rows of
// embed values (seqlen rows per head); position r = row % seqlen reads row r of the cos and sin
// caches (row widths cos_w, sin_w), its j-th value for the j-th pair (x0, x1): adjacent values
// when interleaved, the j-th of each half otherwise. Out: x0 cos - x1 sin, x0 sin + x1 cos.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int interleaved = 0;

layout(binding = 0) readonly buffer X { sfp x[]; };
layout(binding = 1) readonly buffer Cos { sfp cos_cache[]; };
layout(binding = 2) readonly buffer Sin { sfp sin_cache[]; };
layout(binding = 3) writeonly buffer Out { sfp y[]; };

layout(push_constant) uniform Params { int n; int embed; int seqlen; int cos_w; int sin_w; } p;

#include "index.h"

void main() {
    int i = global_index_1d();
    if (i >= p.n) return;
    int half_dim = p.embed / 2;
    int row = i / p.embed;
    int e = i - row * p.embed;
    int base = row * p.embed;
    int r = row % p.seqlen;
    int j;
    bool first;
    float x0, x1;
    if (interleaved == 1) {
        j = e / 2;
        first = (e & 1) == 0;
        x0 = float(x[base + 2 * j]);
        x1 = float(x[base + 2 * j + 1]);
    } else {
        first = e < half_dim;
        j = first ? e : e - half_dim;
        x0 = float(x[base + j]);
        x1 = float(x[base + half_dim + j]);
    }
    float c = float(cos_cache[r * p.cos_w + j]);
    float s = float(sin_cache[r * p.sin_w + j]);
    precise float a = first ? x0 * c : x0 * s;
    precise float b = first ? x1 * s : x1 * c;
    y[i] = sfp(first ? a - b : a + b);
}
