"""Which family module implements each ncnn layer type, so that loading a model imports only
the families it uses (all 22 cost 15-25 ms of a process's start on the H100, 2026-11-23).

``tests/test_layer_schema.py`` checks this table against what the modules register.
"""

from __future__ import annotations

FAMILIES: dict[str, tuple[str, ...]] = {
    "activation": (
        "Clip",
        "Dropout",
        "ELU",
        "GELU",
        "HardSigmoid",
        "HardSwish",
        "Mish",
        "Noop",
        "ReLU",
        "Sigmoid",
        "Swish",
        "TanH",
        "UnaryOp",
    ),
    "activation_more": ("AbsVal", "BNLL", "CELU", "Erf", "GLU", "SELU", "Shrink", "Softplus"),
    "attention": ("MultiHeadAttention", "SDPA"),
    "binary": ("BinaryOp", "Eltwise"),
    "borders": ("Crop", "Padding"),
    "convolution": ("Convolution", "ConvolutionDepthWise"),
    "data_movement": ("Concat", "Permute", "PixelShuffle", "ShuffleChannel", "Slice", "Split"),
    "deconvolution": ("Deconvolution", "DeconvolutionDepthWise"),
    "deformable": ("DeformableConv2D",),
    "detection": ("DetectionOutput", "PriorBox"),
    "einsum": ("Einsum",),
    "elementwise_math": ("Exp", "Log", "Power", "Threshold"),
    "embed": ("Embed",),
    "fold": ("Fold", "Unfold"),
    "gridsample": ("GridSample",),
    "innerproduct": ("InnerProduct",),
    "inputs": ("Input", "MemoryData"),
    "layers_1d": ("Convolution1D", "Pooling1D"),
    "layers_1d_more": ("ConvolutionDepthWise1D", "Deconvolution1D", "DeconvolutionDepthWise1D"),
    "layers_3d": (
        "Convolution3D",
        "ConvolutionDepthWise3D",
        "Deconvolution3D",
        "DeconvolutionDepthWise3D",
    ),
    "layers_3d_pool": ("Pooling3D",),
    "matmul": ("Gemm", "MatMul"),
    "normalization": ("BatchNorm", "Bias", "PReLU", "Scale"),
    "norms": ("GroupNorm", "InstanceNorm", "LRN", "LayerNorm", "RMSNorm"),
    "norms_more": ("MVN", "Normalize"),
    "packing": ("Packing",),
    "pooling": ("Pooling",),
    "pooling_more": ("StatisticsPooling",),
    "pooling_roi": ("PSROIPooling", "ROIAlign", "ROIPooling"),
    "proposal": ("Proposal",),
    "quantize": ("Dequantize", "Quantize", "Requantize"),
    "rearrange": ("CopyTo", "DeepCopy", "Diag", "Flip", "Reorg"),
    "recurrent": ("GRU", "LSTM", "RNN"),
    "reduction": ("Reduction", "Softmax"),
    "resample": ("Interp",),
    "reshape": ("Flatten", "Reshape"),
    "rotary": ("RotaryEmbed",),
    "scan": ("ArgMax", "CumulativeSum"),
    "shape_ops": ("Cast", "ExpandDims", "Squeeze", "Tile"),
    "spectrogram": ("InverseSpectrogram", "Spectrogram"),
    "yolo": ("YoloDetectionOutput", "Yolov3DetectionOutput"),
}

#: ncnn type name -> the module of asyncvk.layers that registers it.
HOME: dict[str, str] = {t: family for family, types in FAMILIES.items() for t in types}
