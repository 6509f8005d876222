// ncnn's std::max and std::min, NaN included. std::max(a, b) is (a < b) ? b : a and
// std::min(a, b) is (b < a) ? b : a: a NaN in either place gives back a. GLSL's max(), min()
// and clamp() leave NaN undefined (llvmpipe drops it), and a compiler may rewrite a < b ? b : a
// as max(), so NaN is tested on the bits, which no float optimisation can fold away.
bool is_nan(float x) { return (floatBitsToUint(x) & 0x7fffffffu) > 0x7f800000u; }
float std_max(float a, float b) { return is_nan(a) || is_nan(b) ? a : max(a, b); }
float std_min(float a, float b) { return is_nan(a) || is_nan(b) ? a : min(a, b); }
