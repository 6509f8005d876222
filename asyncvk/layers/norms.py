"""Normalization over statistics computed from the blob itself: LRN, LayerNorm, GroupNorm,
InstanceNorm, RMSNorm (ncnn's reference semantics)."""
