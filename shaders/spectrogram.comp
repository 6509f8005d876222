#version 450
// Spectrogram, as ncnn's spectrogram.cpp: one invocation computes one (frequency, frame) of the
// windowed DFT of a 1-D signal by a direct sum over n_fft samples. x = frame, y = frequency.
// With center the signal is read as padded by n_fft / 2 each side (0 constant, 1 replicate,
// 2 reflect) without a padded copy. Twiddles are cos, sin(2 pi m / n_fft) for m < n_fft,
// indexed by (frequency * k) mod n_fft. A two-sided spectrum's upper half is the conjugate of
// the lower, as ncnn copies it. power 0 writes (re, im) pairs, 1 the magnitude, 2 its square.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int n_fft = 1;
layout(constant_id = 1) const int hoplen = 1;
layout(constant_id = 2) const int power = 0;
layout(constant_id = 3) const int center = 1;
layout(constant_id = 4) const int pad_type = 2;
layout(constant_id = 5) const float norm = 1.0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Window { sfp window_data[]; };
layout(binding = 3) readonly buffer Twiddle { sfp twiddle[]; };  // (cos, sin) pairs

layout(push_constant) uniform Params {
    int w; int frames; int freqs;
} p;

#include "index.h"

float signal_at(int s) {
    if (s < 0) {
        if (pad_type == 0) return 0.0;
        s = pad_type == 1 ? 0 : -s;
    } else if (s >= p.w) {
        if (pad_type == 0) return 0.0;
        s = pad_type == 1 ? p.w - 1 : 2 * (p.w - 1) - s;
    }
    return float(x_in[s]);
}

void invoke(int frame, int freq) {
    int nyquist = n_fft / 2;
    bool mirrored = freq > nyquist;
    int f = mirrored ? n_fft - freq : freq;
    int start = frame * hoplen - (center == 1 ? nyquist : 0);
    float re = 0.0;
    float im = 0.0;
    int m = 0;
    for (int k = 0; k < n_fft; k++) {
        float v = signal_at(start + k) * float(window_data[k]);
        re += v * float(twiddle[2 * m]);
        im -= v * float(twiddle[2 * m + 1]);
        m += f;
        if (m >= n_fft) m -= n_fft;
    }
    re *= norm;
    im *= norm;
    if (mirrored) im = -im;
    int at = freq * p.frames + frame;
    if (power == 0) {
        x_out[2 * at] = sfp(re);
        x_out[2 * at + 1] = sfp(im);
    } else if (power == 1) {
        x_out[at] = sfp(sqrt(re * re + im * im));
    } else {
        x_out[at] = sfp(re * re + im * im);
    }
}

void main() {
    ivec3 id = ivec3(gl_GlobalInvocationID);
    ivec3 stride = grid_stride();
    for (int y = id.y; y < p.freqs; y += stride.y)
        for (int x = id.x; x < p.frames; x += stride.x) invoke(x, y);
}
