#version 450
// binary.comp for operands laid out as the output (same shape, contiguous) or a scalar b: the
// value index is the invocation index, so no per-value divisions. CPU devices only: llvmpipe
// turns binary.comp's three integer divisions per value into scalar code, and they cost more
// than the loads (a 48k-value mul and add: 0.65-0.70 -> 0.23-0.30 ms, lavapipe).
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int op = 0;
layout(constant_id = 1) const int with_scalar = 0;
layout(constant_id = 2) const float scalar = 0.0;
layout(constant_id = 3) const float coeff_a = 1.0;
layout(constant_id = 4) const float coeff_b = 1.0;

layout(binding = 0) readonly buffer A { sfp a[]; };
layout(binding = 1) readonly buffer B { sfp b[]; };
layout(binding = 2) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params { int n; } p;

#include "std_minmax.h"
#include "index.h"

#include "binary_apply.h"

void main() {
    int i = global_index_1d();
    if (i >= p.n) return;
    float va = float(a[i]) * coeff_a;
    float vb = with_scalar == 1 ? scalar : float(b[i]) * coeff_b;
    x_out[i] = sfp(apply(va, vb));
}
