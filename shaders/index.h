// Dispatch indexing that stays within the device's maxComputeWorkGroupCount (65535 per axis on
// most devices). The host (asyncvk/layers/_gpu_api.py) folds a 1-D dispatch of more groups than
// the x limit into rows of at most that many groups (groups_1d), and caps each axis of a 2-D or
// 3-D dispatch at its limit (capped_groups): an axis with more work loops in strides of the grid.
// Either way the shader's own bounds check (against n, or the output extents) still applies.

// The linear index of this invocation in a folded 1-D dispatch (rows of gl_NumWorkGroups.x).
int global_index_1d() {
    return int(gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * gl_WorkGroupSize.x)
               + gl_GlobalInvocationID.x);
}

// The linear workgroup index in a folded 1-D dispatch of whole workgroups.
int workgroup_index_1d() {
    return int(gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x);
}

// Invocations the whole grid spans per axis: the step of a loop over an axis capped by the host.
ivec3 grid_stride() {
    return ivec3(gl_NumWorkGroups * gl_WorkGroupSize);
}
