"""GPU implementations of ncnn layers (one module per shader family), registered by type name."""
