#version 450
// InnerProduct for CPU devices: out[o] = act(bias[o] + sum_i weight[o][i] * in[i]), one
// invocation computing 8 outputs, blocks of 8 outputs along x. The layer repacks the weights
// as [n_out / 8][n_in][8] (outputs zero-padded to 8), read as two vec4 loads per input: 3 loads
// per 8 multiply-adds, where one output per invocation (innerproduct.comp's flat layout) made 2
// per one, and llvmpipe runs every per-lane load as a scalar loop. vgg16's fc6 (25088 inputs,
// 4096 outputs) took 139 ms on lavapipe one output per invocation.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int bias_term = 0;
layout(constant_id = 1) const int act_type = 0;
layout(constant_id = 2) const float act_a = 0.0;
layout(constant_id = 3) const float act_b = 0.0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Weight { sfpvec4 weight[]; };
layout(binding = 3) readonly buffer Bias { sfp bias[]; };

layout(push_constant) uniform Params { int n_in; int n_out; } p;

#include "std_minmax.h"
#include "activation.h"
#include "index.h"

void outputs_of_block(int block) {
    vec4 a = vec4(0.0);  // outputs 0-3 of the block
    vec4 b = vec4(0.0);  // outputs 4-7
    int wv = block * p.n_in * 2;
    for (int i = 0; i < p.n_in; i++) {
        float x = float(x_in[i]);
        a += x * vec4(weight[wv]);
        b += x * vec4(weight[wv + 1]);
        wv += 2;
    }
    for (int j = 0; j < 8; j++) {
        int o = block * 8 + j;
        if (o >= p.n_out) break;
        float v = (j < 4 ? a[j] : b[j - 4]) + (bias_term == 1 ? float(bias[o]) : 0.0);
        x_out[o] = sfp(activation(v, act_type, act_a, act_b));
    }
}

void main() {
    int blocks = (p.n_out + 7) / 8;  // BLOCK in asyncvk/layers/innerproduct.py
    for (int block = int(gl_GlobalInvocationID.x); block < blocks; block += grid_stride().x)
        outputs_of_block(block);
}
