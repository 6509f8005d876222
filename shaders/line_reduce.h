// A workgroup reducing one line together: each invocation folds its stride of the line, then
// the partials meet in shared memory, halving each step. The host gives a power-of-two local
// size of at most LINE_LOCAL. Every invocation of the workgroup must call these (barriers).
#define LINE_LOCAL 256
shared float line_partial[LINE_LOCAL];

float line_max(float mine) {
    uint t = gl_LocalInvocationID.x;
    line_partial[t] = mine;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
        if (t < s) line_partial[t] = std_max(line_partial[t], line_partial[t + s]);
        barrier();
    }
    float all = line_partial[0];
    barrier();  // the array is free again for the next reduction
    return all;
}

float line_sum(float mine) {
    uint t = gl_LocalInvocationID.x;
    line_partial[t] = mine;
    barrier();
    for (uint s = gl_WorkGroupSize.x / 2; s > 0; s >>= 1) {
        if (t < s) line_partial[t] += line_partial[t + s];
        barrier();
    }
    float all = line_partial[0];
    barrier();
    return all;
}
