"""numpy reference implementations (the CPU path) of ncnn layers."""
