#version 450
// BinaryOp and Eltwise: out = op(a * coeff_a, b * coeff_b) with broadcasting. The host turns
// ncnn's broadcasting rules into per-dimension element strides for a and b over the 4-D output
// (w, h, d, c); a broadcast dimension has stride 0. with_scalar uses b = scalar (b_mode 1).
//   0 add 1 sub 2 mul 3 div 4 max 5 min 6 pow 7 rsub 8 rdiv 9 rpow 10 atan2 11 ratan2
// max and min are ncnn's std::max(x, y) / std::min(x, y): NaN only when x is NaN.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int op = 0;
layout(constant_id = 1) const int with_scalar = 0;
layout(constant_id = 2) const float scalar = 0.0;
layout(constant_id = 3) const float coeff_a = 1.0;
layout(constant_id = 4) const float coeff_b = 1.0;

layout(binding = 0) readonly buffer A { sfp a[]; };
layout(binding = 1) readonly buffer B { sfp b[]; };
layout(binding = 2) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params {
    ivec4 shape;     // output w, h, d, c
    ivec4 a_stride;  // element strides of a per output dim
    ivec4 b_stride;
} p;

#include "std_minmax.h"
#include "index.h"

#include "binary_apply.h"

void main() {
    int i = global_index_1d();
    int total = p.shape.x * p.shape.y * p.shape.z * p.shape.w;
    if (i >= total) return;
    int x = i % p.shape.x;
    int r = i / p.shape.x;
    int y = r % p.shape.y;
    r /= p.shape.y;
    int z = r % p.shape.z;
    int c = r / p.shape.z;
    ivec4 pos = ivec4(x, y, z, c);
    float va = float(a[pos.x * p.a_stride.x + pos.y * p.a_stride.y + pos.z * p.a_stride.z
                      + pos.w * p.a_stride.w]) * coeff_a;
    float vb = with_scalar == 1
        ? scalar
        : float(b[pos.x * p.b_stride.x + pos.y * p.b_stride.y + pos.z * p.b_stride.z
                  + pos.w * p.b_stride.w]) * coeff_b;
    x_out[i] = sfp(apply(va, vb));
}
