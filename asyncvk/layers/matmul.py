"""Matrix products: Gemm and MatMul (ncnn's reference semantics)."""
