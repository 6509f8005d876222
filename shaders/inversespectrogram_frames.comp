#version 450
// InverseSpectrogram's first pass, as ncnn's inversespectrogram.cpp: one invocation computes
// sample i of frame j's windowed inverse DFT (a direct sum over n_fft bins) into a float
// scratch of (frames, n_fft, 2). x = sample, y = frame. The input is (freqs, frames, 2): a
// one-sided spectrum (freqs = n_fft / 2 + 1) is completed with the conjugates of its mirror.
// Twiddles are cos, sin(2 pi m / n_fft) for m < n_fft, indexed by (i * k) mod n_fft.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int n_fft = 1;
layout(constant_id = 1) const float norm = 1.0;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Frames { float frames_out[]; };
layout(binding = 2) readonly buffer Window { sfp window_data[]; };
layout(binding = 3) readonly buffer Twiddle { sfp twiddle[]; };  // (cos, sin) pairs

layout(push_constant) uniform Params {
    int frames; int onesided;
} p;

#include "index.h"

void invoke(int i, int j) {
    int nyquist = n_fft / 2;
    float re = 0.0;
    float im = 0.0;
    int m = 0;
    for (int k = 0; k < n_fft; k++) {
        bool mirrored = p.onesided == 1 && k > nyquist;
        int bin = (mirrored ? n_fft - k : k) * p.frames + j;
        float a = float(x_in[2 * bin]) * norm;
        float b = float(x_in[2 * bin + 1]) * norm;
        if (mirrored) b = -b;
        float c = float(twiddle[2 * m]);
        float s = float(twiddle[2 * m + 1]);
        re += a * c - b * s;
        im += a * s + b * c;
        m += i;
        if (m >= n_fft) m -= n_fft;
    }
    float win = float(window_data[i]);
    re = re / float(n_fft) * win;
    im = im / float(n_fft) * win;
    int at = j * n_fft + i;
    frames_out[2 * at] = re;
    frames_out[2 * at + 1] = im;
}

void main() {
    ivec3 id = ivec3(gl_GlobalInvocationID);
    ivec3 stride = grid_stride();
    for (int y = id.y; y < p.frames; y += stride.y)
        for (int x = id.x; x < n_fft; x += stride.x) invoke(x, y);
}
