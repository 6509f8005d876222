#version 450
// softmax.comp with a workgroup per line, for long lines (a 1000-class vector took one
// invocation 0.08 ms on the H100). The max is ncnn's std::max fold from -FLT_MAX in any order
// (a NaN never becomes it), so it is the one-invocation shader's bit for bit; the sum is added
// in a different order.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params { int outer; int len; int inner; } p;

#include "std_minmax.h"
#include "index.h"
#include "line_reduce.h"

void main() {
    int line = workgroup_index_1d();
    if (line >= p.outer * p.inner) return;  // the whole workgroup: no barrier is left waiting
    int base = (line / p.inner) * p.len * p.inner + line % p.inner;
    int t = int(gl_LocalInvocationID.x);
    int n = int(gl_WorkGroupSize.x);
    float m = -3.402823466e+38;
    for (int j = t; j < p.len; j += n) m = std_max(m, float(x_in[base + j * p.inner]));
    m = line_max(m);
    float s = 0.0;
    for (int j = t; j < p.len; j += n) s += exp(float(x_in[base + j * p.inner]) - m);
    s = line_sum(s);
    for (int j = t; j < p.len; j += n) {
        x_out[base + j * p.inner] = sfp(exp(float(x_in[base + j * p.inner]) - m) / s);
    }
}
