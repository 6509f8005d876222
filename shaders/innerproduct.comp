#version 450
// InnerProduct: out[o] = act(bias[o] + sum_i weight[o][i] * in[i]) over the flattened input.
// One subgroup-free workgroup per output: local_size.x threads stride over the inputs and
// reduce in shared memory, so long rows (4096+) are not one thread's serial loop.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int bias_term = 0;
layout(constant_id = 1) const int act_type = 0;
layout(constant_id = 2) const float act_a = 0.0;
layout(constant_id = 3) const float act_b = 0.0;
// CPU devices: one output per invocation, outputs along x, no shared memory. llvmpipe runs a
// workgroup's invocations 8 at a time with a coroutine switch at every barrier, so the tree
// reduction cost more than the products of a squeeze-excite layer's short rows
// (efficientnet_b0's 32 of them: 35 ms on lavapipe).
layout(constant_id = 4) const int flat_outputs = 0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Weight { sfp weight[]; };
layout(binding = 3) readonly buffer Bias { sfp bias[]; };

layout(push_constant) uniform Params { int n_in; int n_out; } p;

shared float partial[gl_WorkGroupSize.x];

#include "std_minmax.h"
#include "activation.h"
#include "index.h"

void one_output(int o) {
    int row = o * p.n_in;
    float sum = 0.0;
    for (int i = 0; i < p.n_in; i++) sum += float(x_in[i]) * float(weight[row + i]);
    float v = sum + (bias_term == 1 ? float(bias[o]) : 0.0);
    x_out[o] = sfp(activation(v, act_type, act_a, act_b));
}

void main() {
    if (flat_outputs == 1) {
        ivec3 stride = grid_stride();
        for (int o = int(gl_GlobalInvocationID.x); o < p.n_out; o += stride.x) one_output(o);
        return;
    }
    int o = workgroup_index_1d();  // folded: the host may split outputs over x and y
    int lane = int(gl_LocalInvocationID.x);
    int width = int(gl_WorkGroupSize.x);
    float sum = 0.0;
    if (o < p.n_out) {
        int row = o * p.n_in;
        for (int i = lane; i < p.n_in; i += width) {
            sum += float(x_in[i]) * float(weight[row + i]);
        }
    }
    partial[lane] = sum;
    barrier();
    for (int s = width / 2; s > 0; s >>= 1) {
        if (lane < s) partial[lane] += partial[lane + s];
        barrier();
    }
    if (lane == 0 && o < p.n_out) {
        float v = partial[0] + (bias_term == 1 ? float(bias[o]) : 0.0);
        x_out[o] = sfp(activation(v, act_type, act_a, act_b));
    }
}
