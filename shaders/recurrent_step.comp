#version 450
// One time step of ncnn's RNN (cell 0), LSTM (1) or GRU (2), every direction in one dispatch
// (asyncvk/layers/recurrent.py): invocation d * hidden + q computes hidden unit q of direction d
// at input row ti from the previous hidden state, as rnn.cpp, lstm.cpp and gru.cpp do. The
// input's part of every gate, bias + weight_xc x (GRU's new gate: its WN bias), was summed
// for all steps at once before (recurrent_input.comp); each gate adds its h terms in order. weight_hc is stored transposed, (num_output, gates * hidden) per direction, so that
// neighbouring units read neighbouring weights. LSTM gates I F O G; GRU R U N, whose BN bias
// (bias_c row 3) goes inside the reset product.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int cell = 0;

layout(binding = 0) readonly buffer XGates { float x_gates[]; };  // (dirs, T, gates * hidden)
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };       // (T, dirs * num_output)
layout(binding = 2) readonly buffer BiasC { sfp bias_c[]; };     // (dirs, bias rows, hidden)
layout(binding = 3) readonly buffer WeightHc { sfp weight_hc[]; };
layout(binding = 4) readonly buffer HPrev { float h_prev[]; };    // (dirs, num_output)
// (dirs, num_output); with a projection the LSTM's (dirs, hidden) units before it
layout(binding = 5) writeonly buffer HNext { float h_next[]; };
layout(binding = 6) buffer CellState { float cell_state[]; };     // LSTM: (dirs, hidden)
layout(binding = 7) writeonly buffer HOut { sfp hidden_out[]; };  // the final hidden state
layout(binding = 8) writeonly buffer COut { sfp cell_out[]; };    // the final cell state

layout(push_constant) uniform Params {
    int T;
    int t;
    int num_output;
    int hidden;
    int dirs;
    int reverse;  // the one direction runs from the last step
    int project;  // LSTM: write the units to h_next only; recurrent_project.comp does the rest
    int final_h;  // this step's h is the hidden output
    int final_c;  // this step's c is the cell output
} p;

#include "index.h"

float sigmoid(float v) { return 1.0 / (1.0 + exp(-v)); }

int rows;  // gates * hidden
int hw0;   // this direction's weight_hc

// sum + the h terms of ncnn's gate row `row` (column `row` of the transposed weight_hc)
float from_h(float sum, int row, int h0) {
    for (int i = 0; i < p.num_output; i++) {
        sum += float(weight_hc[hw0 + i * rows + row]) * h_prev[h0 + i];
    }
    return sum;
}

void main() {
    int gid = global_index_1d();
    if (gid >= p.dirs * p.hidden) return;
    int d = gid / p.hidden;
    int q = gid - d * p.hidden;
    int H = p.hidden;
    int ti = (d == 1 || p.reverse == 1) ? p.T - 1 - p.t : p.t;
    rows = (cell == 0 ? 1 : (cell == 1 ? 4 : 3)) * H;
    hw0 = d * p.num_output * rows;
    int g0 = (d * p.T + ti) * rows + q;  // this unit's x part of the first gate
    int h0 = d * p.num_output;
    float h;
    if (cell == 0) {
        h = tanh(from_h(x_gates[g0], q, h0));
    } else if (cell == 1) {
        float I = sigmoid(from_h(x_gates[g0], q, h0));
        float F = sigmoid(from_h(x_gates[g0 + H], q + H, h0));
        float O = sigmoid(from_h(x_gates[g0 + 2 * H], q + 2 * H, h0));
        float G = tanh(from_h(x_gates[g0 + 3 * H], q + 3 * H, h0));
        int c = d * H + q;
        float c2 = F * cell_state[c] + I * G;
        h = O * tanh(c2);
        cell_state[c] = c2;
        if (p.final_c == 1) cell_out[c] = sfp(c2);
    } else {
        float R = sigmoid(from_h(x_gates[g0], q, h0));
        float U = sigmoid(from_h(x_gates[g0 + H], q + H, h0));
        float N = from_h(float(bias_c[(d * 4 + 3) * H + q]), q + 2 * H, h0);
        N = tanh(x_gates[g0 + 2 * H] + R * N);
        h = (1.0 - U) * N + U * h_prev[h0 + q];
    }
    if (p.project == 1) {
        h_next[d * H + q] = h;
        return;
    }
    h_next[h0 + q] = h;
    x_out[ti * p.dirs * p.num_output + h0 + q] = sfp(h);
    if (p.final_h == 1) hidden_out[h0 + q] = sfp(h);
}
