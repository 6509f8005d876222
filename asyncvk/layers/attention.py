"""Attention: MultiHeadAttention and SDPA (ncnn's reference semantics)."""
