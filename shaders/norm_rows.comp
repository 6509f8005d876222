#version 450
// LayerNorm, RMSNorm, InstanceNorm and GroupNorm: normalize each row of a blob viewed as
// (rows, len), one workgroup per row (a workgroup takes row r, r + groups, ... when there are
// more rows than workgroups). centered 1: a = 1 / sqrt(var + eps), b = -mean * a; centered 0
// (RMSNorm): a = 1 / sqrt(mean(x^2) + eps), b = 0. out = x * a + b, then with affine
// out * gamma[k] + beta[k] where k = row * per_row + j / div for element j of the row.
// The local size must be at most 64 (the shared array).
layout(local_size_x_id = 233, local_size_y_id = 234, local_size_z_id = 235) in;

layout(constant_id = 0) const int centered = 1;
layout(constant_id = 1) const int affine = 1;
layout(constant_id = 2) const float eps = 0.001;

layout(binding = 0) readonly buffer In { sfp x_in[]; };
layout(binding = 1) writeonly buffer Out { sfp x_out[]; };
layout(binding = 2) readonly buffer Gamma { sfp gamma[]; };
layout(binding = 3) readonly buffer Beta { sfp beta[]; };

layout(push_constant) uniform Params { int rows; int len; int per_row; int div; } p;

shared float partial[64];

// The sum of every invocation's v, returned to all of them.
float workgroup_sum(float v) {
    partial[gl_LocalInvocationID.x] = v;
    barrier();
    float s = 0.0;
    for (uint t = 0u; t < gl_WorkGroupSize.x; t++) s += partial[t];
    barrier();
    return s;
}

void main() {
    int first = int(gl_LocalInvocationID.x);
    int step = int(gl_WorkGroupSize.x);
    for (int r = int(gl_WorkGroupID.x); r < p.rows; r += int(gl_NumWorkGroups.x)) {
        int base = r * p.len;
        float mean = 0.0;
        if (centered == 1) {
            float s = 0.0;
            for (int j = first; j < p.len; j += step) s += float(x_in[base + j]);
            mean = workgroup_sum(s) / float(p.len);
        }
        float sq = 0.0;
        for (int j = first; j < p.len; j += step) {
            float d = float(x_in[base + j]) - mean;
            sq += d * d;
        }
        float var = workgroup_sum(sq) / float(p.len);
        float a = 1.0 / sqrt(var + eps);
        float b = -mean * a;
        for (int j = first; j < p.len; j += step) {
            float v = float(x_in[base + j]) * a + b;
            if (affine == 1) {
                int k = r * p.per_row + j / p.div;
                v = v * float(gamma[k]) + float(beta[k]);
            }
            x_out[base + j] = sfp(v);
        }
    }
}
