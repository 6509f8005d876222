// The next step's operands of an implicit-GEMM convolution (convolution_gemm.comp and
// convolution_gemm_coopmat.comp), read from global memory into registers while the current
// step multiplies out of shared memory, so their latency hides behind the arithmetic: FETCH
// taps of one output channel's weights (next_a) and of one output pixel's patch (next_b), zero
// past k_end. The includer defines FETCH and declares weight, x_in, p and the kernel's
// specialization constants (convolution_gemm.comp's).
float next_a[FETCH];
float next_b[FETCH];

void fetch(int k0, int k_end, bool m_ok, int wrow, int a_k, bool n_ok, int b_k, int y0, int x0) {
    for (int j = 0; j < FETCH; j++) {
        int k = k0 + a_k + j;
        next_a[j] = (m_ok && k < k_end) ? float(weight[wrow + k]) : 0.0;
    }
    // the patch's taps k .. k + FETCH - 1, walked without a division per tap
    const int maxk = kernel_w * kernel_h;
    int k = k0 + b_k;
    int ic = k / maxk;
    int r = k - ic * maxk;
    int ky = r / kernel_w;
    int kx = r - ky * kernel_w;
    for (int j = 0; j < FETCH; j++) {
        float v = 0.0;
        if (n_ok && k + j < k_end) {
            int y = y0 + ky * dilation_h;
            int x = x0 + kx * dilation_w;
            bool inside = y >= 0 && y < p.h && x >= 0 && x < p.w;
            v = inside ? float(x_in[(ic * p.h + y) * p.w + x]) : pad_value;
        }
        next_b[j] = v;
        kx++;
        if (kx == kernel_w) {
            kx = 0;
            ky++;
            if (ky == kernel_h) {
                ky = 0;
                ic++;
            }
        }
    }
}
