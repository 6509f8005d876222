#version 450
// The input's part of every gate of a recurrent layer (asyncvk/layers/recurrent.py), for every
// step and direction at once, before the steps: invocation (d, t, row) sums bias_c and then
// weight_xc row `row` times input row t, in order, as rnn.cpp, lstm.cpp and gru.cpp begin each
// gate (GRU's new gate: its WN bias, bias row 2). weight_xc is stored transposed, (size, gates *
// hidden) per direction, so that neighbouring invocations read neighbouring weights.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(binding = 0) readonly buffer In { sfp x_in[]; };            // (T, size)
layout(binding = 1) readonly buffer WeightXc { sfp weight_xc[]; }; // (dirs, size, rows)
layout(binding = 2) readonly buffer BiasC { sfp bias_c[]; };       // (dirs, bias rows, hidden)
layout(binding = 3) writeonly buffer XGates { float x_gates[]; };  // (dirs, T, rows)

layout(push_constant) uniform Params {
    int T;
    int size;
    int rows;         // gates * hidden
    int bias_stride;  // bias rows * hidden
    int dirs;
} p;

#include "index.h"

void main() {
    int gid = global_index_1d();
    if (gid >= p.dirs * p.T * p.rows) return;
    int dt = gid / p.rows;
    int row = gid - dt * p.rows;
    int d = dt / p.T;
    int t = dt - d * p.T;
    float sum = float(bias_c[d * p.bias_stride + row]);
    int w = d * p.size * p.rows + row;
    int x0 = t * p.size;
    for (int i = 0; i < p.size; i++) sum += float(weight_xc[w + i * p.rows]) * float(x_in[x0 + i]);
    x_gates[gid] = sum;
}
