// Fused activation of Convolution / Deconvolution / InnerProduct (ncnn activation_type):
// 0 none, 1 relu, 2 leakyrelu(a), 3 clip(a, b), 4 sigmoid, 5 mish, 6 hardswish(a, b).
// As ncnn's activation_ss, NaN included: relu is fmaxf(x, 0.f), so NaN becomes 0; the others
// keep NaN. Needs std_minmax.h included before it.
float activation(float x, int type, float a, float b) {
    if (type == 1) return is_nan(x) ? 0.0 : max(x, 0.0);
    if (type == 0 || is_nan(x)) return x;
    if (type == 2) return x > 0.0 ? x : x * a;
    if (type == 3) {
        float v = x < a ? a : x;  // ncnn: min first, then max
        return v > b ? b : v;
    }
    if (type == 4) return 1.0 / (1.0 + exp(-x));
    if (type == 5) return x * tanh(x > 20.0 ? x : log(1.0 + exp(x)));
    if (type == 6) {
        float lower = -b / a;
        float upper = 1.0 / a + lower;
        return x < lower ? 0.0 : (x > upper ? x : x * (x * a + b));
    }
    return x;
}
