#version 450
// Elementwise activations and UnaryOp in one shader: the op is a specialization constant, so
// identical layers share one pipeline and every op shares one SPIR-V compile.
//   0 identity   1 relu/leaky(a=slope)   2 clip(a=min, b=max)   3 sigmoid   4 tanh
//   5 swish      6 hardsigmoid(a=alpha, b=beta)   7 hardswish(a=alpha, b=beta)   8 mish
//   9 elu(a=alpha)   10 gelu erf   11 gelu tanh   12 abs   13 neg   14 floor   15 ceil
//   16 square   17 sqrt   18 rsqrt   19 exp   20 log   21 sin   22 cos   23 tan   24 asin
//   25 acos   26 atan   27 reciprocal   28 log10   29 round (half to even)   30 trunc
//   31 scale(a): x * a   32 threshold(a): x > a ? 1 : 0   33 x rounded to fp16
//   34 x rounded to bf16 (both to nearest even, as ncnn's Cast)
//   35 shrink(a=lambd, b=bias)   36 celu(a=alpha)   37 selu(a=alpha*lambda, b=lambda)
//   38 bnll   39 softplus   40 erf
// Every op gives NaN for NaN, as ncnn's layers do (ReLU is x < 0 ? x * slope : x, Clip and the
// hard ops compare, which NaN fails); GLSL's max()/clamp() would be free to drop it.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int op = 0;
layout(constant_id = 1) const float a = 0.0;
layout(constant_id = 2) const float b = 0.0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params { int n; } p;

#include "std_minmax.h"
#include "index.h"

// The fp16 value nearest to x (ties to even), as F16C's vcvtps2ph: 2^-24 steps below 2^-14
// (subnormals), 11 significant bits above, infinity past 65504
float round_fp16(float x) {
    if (abs(x) == uintBitsToFloat(0x7f800000u)) return x;
    int e = int((floatBitsToUint(x) >> 23) & 0xffu) - 127;
    float quantum = exp2(float(max(e, -14) - 10));
    float r = roundEven(x / quantum) * quantum;
    return abs(r) > 65504.0 ? sign(r) * uintBitsToFloat(0x7f800000u) : r;
}

// erf to within 2 float32 ulps (3 with the device's exp): x * P(x^2) below 1, else
// 1 - exp(Q(|x| - 2.5)) with Q fitted to log(erfc) on [1, 4] (erfc(4) < 2^-25: 1 beyond).
// Least-squares fits made for asyncvk in float64, checked in float32 against libm's erf.
float erf_f32(float x) {
    float ax = abs(x);
    if (ax < 1.0) {
        float t = x * x;
        float p = -0.000562539615;
        p = p * t + 0.00491602346;
        p = p * t - 0.0267099496;
        p = p * t + 0.112801306;
        p = p * t - 0.37612319;
        p = p * t + 1.12837911;
        return x * p;
    }
    float u = min(ax, 4.0) - 2.5;
    float q = 3.87770825e-07;
    q = q * u - 1.94654749e-05;
    q = q * u + 6.66940759e-05;
    q = q * u - 0.00042608814;
    q = q * u + 0.00216799392;
    q = q * u - 0.0108544594;
    q = q * u - 0.943892658;
    q = q * u - 5.35268068;
    q = q * u - 7.80681515;
    float r = 1.0 - exp(q);
    return x < 0.0 ? -r : r;
}

float activate(float x) {
    if (op == 32) return x > a ? 1.0 : 0.0;  // NaN fails the comparison: 0, as ncnn
    if (op == 35) return x < -a ? x + b : (x > a ? x - b : 0.0);  // NaN: 0, as ncnn
    if (op == 0 || is_nan(x)) return x;
    if (op == 1) return x < 0.0 ? (a == 0.0 ? 0.0 : x * a) : x;
    if (op == 2) {
        float v = x < a ? a : x;  // ncnn: min first, then max
        return v > b ? b : v;
    }
    if (op == 3) return 1.0 / (1.0 + exp(-x));
    if (op == 4) return tanh(x);
    if (op == 5) return x / (1.0 + exp(-x));
    if (op == 6 || op == 7) {
        float lower = -b / a;
        float upper = 1.0 / a + lower;
        if (x < lower) return 0.0;
        if (x > upper) return op == 6 ? 1.0 : x;
        return op == 6 ? x * a + b : x * (x * a + b);
    }
    if (op == 8) return x * tanh(x > 20.0 ? x : log(1.0 + exp(x)));
    if (op == 9) return x > 0.0 ? x : a * (exp(x) - 1.0);
    if (op == 10) {
        // erf via Abramowitz-Stegun 7.1.26 refined: max error 1.5e-7
        float z = abs(x) * 0.70710678118654752;
        float t = 1.0 / (1.0 + 0.3275911 * z);
        float y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t
                          - 0.284496736) * t + 0.254829592) * t * exp(-z * z);
        float e = x >= 0.0 ? y : -y;
        return 0.5 * x * (1.0 + e);
    }
    if (op == 11) {
        float inner = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
        return 0.5 * x * (1.0 + tanh(inner));
    }
    if (op == 12) return abs(x);
    if (op == 13) return -x;
    if (op == 14) return floor(x);
    if (op == 15) return ceil(x);
    if (op == 16) return x * x;
    if (op == 17) return sqrt(x);
    if (op == 18) return inversesqrt(x);
    if (op == 19) return exp(x);
    if (op == 20) return log(x);
    if (op == 21) return sin(x);
    if (op == 22) return cos(x);
    if (op == 23) return tan(x);
    // asin/acos through atan2: the builtins are only loosely specified (llvmpipe's are off
    // by 3e-4 near +-1), atan is accurate
    if (op == 24) return atan(x, sqrt((1.0 - x) * (1.0 + x)));
    if (op == 25) return atan(sqrt((1.0 - x) * (1.0 + x)), x);
    if (op == 26) return atan(x);
    if (op == 27) return 1.0 / x;
    if (op == 28) return log(x) * 0.43429448190325182765;
    if (op == 29) return roundEven(x);
    if (op == 30) return trunc(x);
    if (op == 31) return x * a;
    if (op == 33) return round_fp16(x);
    if (op == 36) return x < 0.0 ? (exp(x / a) - 1.0) * a : x;
    if (op == 37) return x < 0.0 ? (exp(x) - 1.0) * a : x * b;
    // BNLL and Softplus as ncnn writes them: log(1 + e) adds 1 and e in float32 first, and Softplus
    // overflows to inf past x = 88.7 where exp does
    if (op == 38) return x > 0.0 ? x + log(1.0 + exp(-x)) : log(1.0 + exp(x));
    if (op == 39) return log(exp(x) + 1.0);
    if (op == 40) return erf_f32(x);
    if (op == 34) {
        uint u = floatBitsToUint(x);  // not NaN here: the carry cannot reach the sign
        return uintBitsToFloat((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
    }
    return x;
}

void main() {
    int i = global_index_1d();
    if (i >= p.n) return;
    x_out[i] = sfp(activate(float(x_in[i])));
}
