// Fused activation of Convolution / Deconvolution / InnerProduct (ncnn activation_type):
// 0 none, 1 relu, 2 leakyrelu(a), 3 clip(a, b), 4 sigmoid, 5 mish, 6 hardswish(a, b).
float activation(float x, int type, float a, float b) {
    if (type == 1) return max(x, 0.0);
    if (type == 2) return x > 0.0 ? x : x * a;
    if (type == 3) return clamp(x, a, b);
    if (type == 4) return 1.0 / (1.0 + exp(-x));
    if (type == 5) return x * tanh(x > 20.0 ? x : log(1.0 + exp(x)));
    if (type == 6) return x * clamp(x * a + b, 0.0, 1.0);
    return x;
}
