#version 450
// A strided 4-D copy: out[base_out + dot(pos, out_stride)] = in[base_in + dot(pos, in_stride)]
// for every pos in extent (w, h, d, c). Concat, Slice, Crop, Permute, PixelShuffle and
// ShuffleChannel are all such copies (sometimes several), so they share one pipeline.
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) buffer Out { sfp x_out[]; };

layout(push_constant) uniform Params {
    ivec4 extent;
    ivec4 in_stride;
    ivec4 out_stride;
    int in_base;
    int out_base;
} p;

void main() {
    int i = int(gl_GlobalInvocationID.x);
    int total = p.extent.x * p.extent.y * p.extent.z * p.extent.w;
    if (i >= total) return;
    int x = i % p.extent.x;
    int r = i / p.extent.x;
    int y = r % p.extent.y;
    r /= p.extent.y;
    int z = r % p.extent.z;
    int c = r / p.extent.z;
    ivec4 pos = ivec4(x, y, z, c);
    int src = p.in_base + pos.x * p.in_stride.x + pos.y * p.in_stride.y + pos.z * p.in_stride.z
              + pos.w * p.in_stride.w;
    int dst = p.out_base + pos.x * p.out_stride.x + pos.y * p.out_stride.y
              + pos.z * p.out_stride.z + pos.w * p.out_stride.w;
    x_out[dst] = x_in[src];
}
