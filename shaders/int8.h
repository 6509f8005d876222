// ncnn's x86 float2int8: round half away from zero as v + copysign(0.5, v) then truncation,
// saturated to [-127, 127]; NaN, infinities and |v| >= 2^31 give -127 (x86's float -> int32
// conversion returns INT_MIN for them). Integer-valued float out. Needs std_minmax.h.
float float2int8(float v) {
    if (is_nan(v) || abs(v) >= 2147483648.0) return -127.0;
    float r = trunc(v + (v < 0.0 ? -0.5 : 0.5));
    return r < -127.0 ? -127.0 : (r > 127.0 ? 127.0 : r);
}

// a * b + c rounded once, as the fused multiply-add of ncnn's x86 int8 epilogue. GLSL's fma()
// may be a multiply then an add (llvmpipe's is), so: Dekker's exact product p + e, the exact
// sum s + e2 of p and c, then s + (e + e2): the fused result but for rare double roundings.
void int8_split(float a, out float hi, out float lo) {
    precise float t = 4097.0 * a;
    precise float h = t - (t - a);
    hi = h;
    lo = a - h;
}

float int8_fma(float a, float b, float c) {
    float ah, al, bh, bl;
    int8_split(a, ah, al);
    int8_split(b, bh, bl);
    precise float p = a * b;
    precise float e = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
    precise float s = p + c;
    precise float v = s - p;
    precise float e2 = (p - (s - v)) + (c - v);
    precise float r = s + (e + e2);
    return r;
}
