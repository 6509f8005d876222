#version 450
// An LSTM's projection (lstm.cpp with hidden_size != num_output), after recurrent_step.comp:
// invocation d * num_output + q sums weight_hr row q of direction d over the step's hidden units
// (weight_hr transposed: neighbouring outputs read neighbouring weights)
// and writes the new hidden state, the output row and, at the last step, the hidden output.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(binding = 0) readonly buffer Units { float units[]; };     // (dirs, hidden)
layout(binding = 1) readonly buffer WeightHr { sfp weight_hr[]; }; // (dirs, hidden, num_output)
layout(binding = 2) writeonly buffer HNext { float h_next[]; };   // (dirs, num_output)
layout(binding = 3) writeonly buffer Out { sfp x_out[]; };
layout(binding = 4) writeonly buffer HOut { sfp hidden_out[]; };

// recurrent_step.comp's push constants
layout(push_constant) uniform Params {
    int T;
    int t;
    int num_output;
    int hidden;
    int dirs;
    int reverse;
    int project;
    int final_h;
    int final_c;
} p;

#include "index.h"

void main() {
    int gid = global_index_1d();
    if (gid >= p.dirs * p.num_output) return;
    int d = gid / p.num_output;
    int q = gid - d * p.num_output;
    int ti = (d == 1 || p.reverse == 1) ? p.T - 1 - p.t : p.t;
    int u0 = d * p.hidden;
    int w = d * p.hidden * p.num_output + q;
    float h = 0.0;
    for (int i = 0; i < p.hidden; i++) h += units[u0 + i] * float(weight_hr[w + i * p.num_output]);
    h_next[gid] = h;
    x_out[ti * p.dirs * p.num_output + gid] = sfp(h);
    if (p.final_h == 1) hidden_out[gid] = sfp(h);
}
