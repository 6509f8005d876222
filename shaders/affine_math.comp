#version 450
// ncnn's Exp, Log and Power: f(shift + x * scale), the op a specialization constant.
//   0 exp(v)   1 powf(base, v)   2 logf(v) * c (c = 1 / logf(base), or 1 for base e)
//   3 powf(v, power)
// powf and logf keep C's edge cases (negative bases, zero, powf(NaN, 0) = 1), which GLSL's
// pow() and log() leave undefined.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int op = 0;
layout(constant_id = 1) const float scale = 1.0;
layout(constant_id = 2) const float shift = 0.0;
layout(constant_id = 3) const float c = 0.0;  // base, 1 / logf(base) or power

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params { int n; } p;

#include "std_minmax.h"
#include "index.h"

float c_nan() { return uintBitsToFloat(0x7fc00000u); }
float c_inf() { return uintBitsToFloat(0x7f800000u); }

float c_powf(float x, float y) {
    if (y == 0.0) return 1.0;
    if (is_nan(x) || is_nan(y)) return c_nan();
    if (x == 0.0) return y > 0.0 ? 0.0 : c_inf();
    float r = pow(abs(x), y);
    if (x > 0.0) return r;
    if (trunc(y) != y) return c_nan();
    return mod(y, 2.0) == 1.0 ? -r : r;  // odd integer powers keep the sign
}

float c_logf(float x) {
    if (is_nan(x) || x < 0.0) return c_nan();
    return x == 0.0 ? -c_inf() : log(x);
}

void main() {
    int i = global_index_1d();
    if (i >= p.n) return;
    float v = shift + float(x_in[i]) * scale;
    float r;
    if (op == 0) r = exp(v);
    else if (op == 1) r = c_powf(c, v);
    else if (op == 2) r = c_logf(v) * c;
    else r = c_powf(v, c);
    x_out[i] = sfp(r);
}
