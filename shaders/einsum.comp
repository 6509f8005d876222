#version 450
// ncnn's Einsum (asyncvk/layers/einsum.py): one invocation per output value, summing as ncnn's
// recursive sum_dim does: the letters after the output's are nested loops, the innermost
// first, each with its own float sum that is added into the next one out when its loop ends;
// each term is 1 * a0 * a1 * ... in operand order.
// table: the letters' sizes (output letters first, then the summed ones in ncnn's order), then
// for each of the 4 operand bindings its element stride per letter (0 where it has none).
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int operands = 1;

layout(binding = 0) writeonly buffer Out { sfp y[]; };
layout(binding = 1) readonly buffer A0 { sfp a0[]; };
layout(binding = 2) readonly buffer A1 { sfp a1[]; };
layout(binding = 3) readonly buffer A2 { sfp a2[]; };
layout(binding = 4) readonly buffer A3 { sfp a3[]; };
layout(binding = 5) readonly buffer Table { int table[]; };

layout(push_constant) uniform Params { int n; int out_letters; int letters; } p;

#include "index.h"

#define MAX_LETTERS 16

int stride(int b, int letter) {
    return table[(1 + b) * p.letters + letter];
}

float term(ivec4 off) {
    precise float v = 1.0 * float(a0[off.x]);
    if (operands > 1) v = v * float(a1[off.y]);
    if (operands > 2) v = v * float(a2[off.z]);
    if (operands > 3) v = v * float(a3[off.w]);
    return v;
}

ivec4 strides(int letter) {
    return ivec4(stride(0, letter), stride(1, letter), stride(2, letter), stride(3, letter));
}

void main() {
    int i = global_index_1d();
    if (i >= p.n) return;

    // this output value's place: its output letters' indexes, the last letter fastest
    ivec4 off = ivec4(0);
    int rest = i;
    for (int l = p.out_letters - 1; l >= 0; l--) {
        int size = table[l];
        int q = rest / size;
        off += strides(l) * (rest - q * size);
        rest = q;
    }

    int first = p.out_letters;
    int summed = p.letters - first;
    if (summed == 0) {
        y[i] = sfp(term(off));
        return;
    }

    float acc[MAX_LETTERS];
    int idx[MAX_LETTERS];
    for (int l = 0; l < summed; l++) {
        acc[l] = 0.0;
        idx[l] = 0;
    }
    float result = 0.0;
    bool done = false;
    while (!done) {
        precise float s = acc[summed - 1] + term(off);
        acc[summed - 1] = s;
        // the odometer: step the innermost letter; a loop that ends adds its sum outwards
        int l = summed - 1;
        while (true) {
            int letter = first + l;
            idx[l] += 1;
            off += strides(letter);
            if (idx[l] < table[letter]) break;
            off -= strides(letter) * table[letter];
            idx[l] = 0;
            if (l == 0) {
                result = acc[0];
                done = true;
                break;
            }
            precise float outer = acc[l - 1] + acc[l];
            acc[l - 1] = outer;
            acc[l] = 0.0;
            l -= 1;
        }
    }
    y[i] = sfp(result);
}
