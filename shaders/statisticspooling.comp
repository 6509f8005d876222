#version 450
// StatisticsPooling as ncnn's statisticspooling.cpp: output q < c is channel q's mean, output
// c + q its population standard deviation around that mean. One invocation per output value,
// adding the channel's values one at a time from 0 as ncnn's loop and the numpy reference
// (asyncvk/layers/pooling_more.py) do.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params { int size; int c; int outc; } p;

#include "index.h"

void main() {
    int gi = global_index_1d();
    if (gi >= p.outc) return;
    int ch = gi < p.c ? gi : gi - p.c;
    int base = ch * p.size;
    precise float sum = 0.0;
    for (int i = 0; i < p.size; i++) sum = sum + float(x_in[base + i]);
    precise float mean = sum / float(p.size);
    if (gi < p.c) {
        x_out[gi] = sfp(mean);
        return;
    }
    precise float squares = 0.0;
    for (int i = 0; i < p.size; i++) {
        precise float d = float(x_in[base + i]) - mean;
        squares = squares + d * d;
    }
    precise float variance = squares / float(p.size);
    x_out[gi] = sfp(sqrt(variance));
}
