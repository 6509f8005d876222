#version 450
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
// Direct convolution, tiled for memory-bound devices: one invocation computes 8 output
// channels of one group at 8 consecutive output columns. Each input value feeds 8 channels and each
// weight vec4 8 columns, so a multiply-add costs 0.25 scalar loads instead of convolution.comp's
// 2 (llvmpipe runs every per-lane load as a scalar loop). 8 columns rather than 4 (0.375 loads)
// took cunet's convolutions 20-27% less time on lavapipe, spilled accumulators included.
// A row's input columns are loaded once for every kx where that is fewer loads (a 3x3 kernel
// at stride 1: 10 per row instead of 24): rrdb 440 -> 284 ms and resnet18 209 -> 155 ms CPU
// per inference on lavapipe; 1x1 kernels and wide strides keep one load per tap and column.
// Weights are repacked by the layer as [group][out_c per group / 8][in_c per group]
// [kernel_h * kernel_w][8] (each group's channels zero-padded to 8). The 8 lanes of a workgroup
// share a channel block, so each loads one of a tap's 8 weights and subgroupShuffle hands them
// round (tap_weights): mobilenet 0.85x, mobilenet_v3 0.94x on lavapipe (paired runs).
// Needs subgroupShuffle; the host turns the sharing off (shared_weights = 0) where a subgroup
// may hold fewer than the workgroup's 8 lanes (_conv_shaders.shared_weights).
// Groups (shufflenet's grouped 1x1 layers) ran convolution.comp, one output per invocation:
// 20-24 ms a layer on lavapipe.
// x = the 8-column block, row-major over the output map (x = row * blocks per row + block),
// z = group * (channel blocks per group) + channel block. llvmpipe runs the invocations of a workgroup 8 at a time along x, so a
// flat x keeps every lane busy on a 7x7 map (an 8x8 workgroup of columns x rows used 2 of 8).
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int kernel_w = 1;
layout(constant_id = 1) const int kernel_h = 1;
layout(constant_id = 2) const int dilation_w = 1;
layout(constant_id = 3) const int dilation_h = 1;
layout(constant_id = 4) const int stride_w = 1;
layout(constant_id = 5) const int stride_h = 1;
layout(constant_id = 6) const int group = 1;
layout(constant_id = 7) const int bias_term = 0;
layout(constant_id = 8) const int act_type = 0;
layout(constant_id = 9) const float act_a = 0.0;
layout(constant_id = 10) const float act_b = 0.0;
layout(constant_id = 11) const float pad_value = 0.0;
// 1: each lane loads one of a tap's 8 weights and subgroupShuffle hands them to every lane (the
// workgroup's 8 lanes share their channel block); 0: every lane loads all 8 (two vec4). Id 13,
// not 12: a body of convolutiondepthwise.comp (whose 12 is flat_columns) stays unlike this one.
layout(constant_id = 13) const int shared_weights = 1;
// input columns one row of a block spans: 8 outputs stride_w apart, plus the kernel's reach.
// Loading the span once serves every kx when it is fewer loads than 8 per tap (3x3: 10 not 24)
const int SPAN = 7 * stride_w + (kernel_w - 1) * dilation_w + 1;
const bool SHARED_ROW = SPAN < 8 * kernel_w;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Weight { sfpvec4 weight[]; };
layout(binding = 2) readonly buffer WeightS { sfp weight_s[]; };
layout(binding = 3) readonly buffer Bias { sfp bias[]; };

layout(push_constant) uniform Params {
    int w; int h; int c;
    int outw; int outh; int outc;
    int pad_left; int pad_top;
} p;

#include "std_minmax.h"
#include "activation.h"
#include "index.h"

// The 8 output channels' weights of one tap, at vec4 index wv (channels 0-3) and wv + 1 (4-7).
// llvmpipe runs every per-lane load as a loop over the lanes with a bounds check per component:
// one scalar load a lane and 8 shuffles (one vpermd each) cost less than two vec4 loads a lane.
void tap_weights(int wv, out vec4 wa, out vec4 wb) {
    if (shared_weights == 1) {
        float w = float(weight_s[wv * 4 + int(gl_SubgroupInvocationID & 7u)]);
        wa = vec4(subgroupShuffle(w, 0u), subgroupShuffle(w, 1u),
                  subgroupShuffle(w, 2u), subgroupShuffle(w, 3u));
        wb = vec4(subgroupShuffle(w, 4u), subgroupShuffle(w, 5u),
                  subgroupShuffle(w, 6u), subgroupShuffle(w, 7u));
    } else {
        wa = vec4(weight[wv]);
        wb = vec4(weight[wv + 1]);
    }
}

// one block of 8 columns (tx) by 8 output channels (tz: the group's block, see main)
void invoke(int tx, int oy, int tz, bool valid) {
    int outc_g = p.outc / group;
    int inc_g = p.c / group;
    int blocks_g = (outc_g + 7) / 8;
    int g = tz / blocks_g;
    int ox0 = tx * 8;
    int oc0 = (tz - g * blocks_g) * 8;  // within the group

    const int maxk = kernel_w * kernel_h;
    vec4 a[8];  // [column] channels 0-3
    vec4 b[8];  // [column] channels 4-7
    for (int j = 0; j < 8; j++) { a[j] = vec4(0.0); b[j] = vec4(0.0); }
    int y0 = oy * stride_h - p.pad_top;
    int x0 = ox0 * stride_w - p.pad_left;
    int wv = tz * inc_g * maxk * 2;
    int plane_size = p.w * p.h;
    for (int ic = 0; ic < inc_g; ic++) {
        int plane = (g * inc_g + ic) * plane_size;
        for (int ky = 0; ky < kernel_h; ky++) {
            int y = y0 + ky * dilation_h;
            bool yin = y >= 0 && y < p.h;
            int row = plane + clamp(y, 0, p.h - 1) * p.w;
            if (SHARED_ROW) {
                // the row's input columns under all 8 outputs and every kx, each loaded once
                float v[SPAN];
                for (int t = 0; t < SPAN; t++) {
                    int x = x0 + t;
                    // branch-free edges: clamp the index, then replace the value by pad_value
                    float value = float(x_in[row + clamp(x, 0, p.w - 1)]);
                    v[t] = yin && x >= 0 && x < p.w ? value : pad_value;
                }
                for (int kx = 0; kx < kernel_w; kx++) {
                    vec4 wa, wb;
                    tap_weights(wv, wa, wb);
                    wv += 2;
                    for (int j = 0; j < 8; j++) {
                        float x = v[j * stride_w + kx * dilation_w];
                        a[j] += x * wa;
                        b[j] += x * wb;
                    }
                }
            } else {
                // each tap's 8 columns loaded by themselves
                for (int kx = 0; kx < kernel_w; kx++) {
                    vec4 wa, wb;
                    tap_weights(wv, wa, wb);
                    wv += 2;
                    for (int j = 0; j < 8; j++) {
                        int x = x0 + j * stride_w + kx * dilation_w;
                        float value = float(x_in[row + clamp(x, 0, p.w - 1)]);
                        value = yin && x >= 0 && x < p.w ? value : pad_value;
                        a[j] += value * wa;
                        b[j] += value * wb;
                    }
                }
            }
        }
    }
    if (!valid) return;
    for (int i = 0; i < 8; i++) {
        if (oc0 + i >= outc_g) break;
        int oc = g * outc_g + oc0 + i;
        float bv = bias_term == 1 ? float(bias[oc]) : 0.0;
        int base = (oc * p.outh + oy) * p.outw;
        for (int j = 0; j < 8; j++) {
            if (ox0 + j >= p.outw) break;
            float s = i < 4 ? a[j][i] : b[j][i - 4];
            x_out[base + ox0 + j] = sfp(activation(s + bv, act_type, act_a, act_b));
        }
    }
}

void main() {
    ivec3 id = ivec3(gl_GlobalInvocationID);
    ivec3 stride = grid_stride();
    int lane = int(gl_LocalInvocationID.x);
    int blocks = (p.outw + 7) / 8;  // TILE_OX in asyncvk/layers/_conv_shaders.py
    int channel_blocks = group * ((p.outc / group + 7) / 8);  // tiled_groups in the layer
    for (int z = id.z; z < channel_blocks; z += stride.z)
        for (int base = id.x - lane; base < blocks * p.outh; base += stride.x) {
            int i = min(base + lane, blocks * p.outh - 1);
            invoke(i % blocks, i / blocks, z, base + lane < blocks * p.outh);
        }
}
