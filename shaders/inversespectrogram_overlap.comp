#version 450
// InverseSpectrogram's second pass, as ncnn's inversespectrogram.cpp: one invocation gathers
// output sample t by overlap-add of the frames that cover it (frame j's sample
// t + n_fft / 2 * center - j * hoplen, frames in order), divided by the sum of the squared
// window over the same samples where that sum is not 0. returns 0 writes (re, im) pairs,
// 1 the real part, 2 the imaginary part.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int n_fft = 1;
layout(constant_id = 1) const int hoplen = 1;
layout(constant_id = 2) const int center = 1;
layout(constant_id = 3) const int returns = 0;

layout(binding = 0) readonly buffer Frames { float frames_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Window { sfp window_data[]; };

layout(push_constant) uniform Params {
    int frames; int outsize;
} p;

#include "index.h"

void main() {
    int t = global_index_1d();
    if (t >= p.outsize) return;
    int q = t + (center == 1 ? n_fft / 2 : 0);
    int first = q - n_fft + 1 <= 0 ? 0 : (q - n_fft + hoplen) / hoplen;
    int last = min(p.frames - 1, q / hoplen);
    float re = 0.0;
    float im = 0.0;
    float sumsquare = 0.0;
    for (int j = first; j <= last; j++) {
        int i = q - j * hoplen;
        float win = float(window_data[i]);
        sumsquare += win * win;
        re += frames_in[2 * (j * n_fft + i)];
        im += frames_in[2 * (j * n_fft + i) + 1];
    }
    if (sumsquare != 0.0) {
        re /= sumsquare;
        im /= sumsquare;
    }
    if (returns == 0) {
        x_out[2 * t] = sfp(re);
        x_out[2 * t + 1] = sfp(im);
    } else {
        x_out[t] = sfp(returns == 1 ? re : im);
    }
}
