#version 450
// Global max / average pooling with a workgroup per channel: pooling.comp gives a global
// window to one invocation, which read a 56x56 channel alone (0.18 ms for 48 channels on the
// H100). Max is ncnn's fold from the channel's first value: every invocation starts from it
// (it is in the window, so no maximum changes), so a NaN comes out exactly when that value is
// NaN and -inf channels stay -inf. The average divides the sum, added in another order, by
// the channel's size.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int pooling_type = 0;  // 0 max, 1 avg

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params { int size; int c; } p;

#include "std_minmax.h"
#include "index.h"
#include "line_reduce.h"

void main() {
    int ch = workgroup_index_1d();
    if (ch >= p.c) return;  // the whole workgroup: no barrier is left waiting
    int base = ch * p.size;
    int n = int(gl_WorkGroupSize.x);
    float acc = pooling_type == 0 ? float(x_in[base]) : 0.0;
    for (int j = int(gl_LocalInvocationID.x); j < p.size; j += n) {
        float v = float(x_in[base + j]);
        acc = pooling_type == 0 ? std_max(acc, v) : acc + v;
    }
    acc = pooling_type == 0 ? line_max(acc) : line_sum(acc) / float(p.size);
    if (gl_LocalInvocationID.x == 0) x_out[ch] = sfp(acc);
}
