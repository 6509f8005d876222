"""The layer types ncnn builds (its ``src/CMakeLists.txt``, ``ncnn_add_layer``, at the version
the ncnn wheel of the tests ships; ArgMax and SPP are in its source but off in its builds):
what ``asyncvk layers`` reports support against."""

from __future__ import annotations

NCNN_LAYER_TYPES = (
    "AbsVal BatchNorm Bias BNLL Concat Convolution Crop Deconvolution Dropout Eltwise "
    "ELU Embed Exp Flatten InnerProduct Input Log LRN MemoryData MVN Pooling Power PReLU "
    "Proposal Reduction ReLU Reshape ROIPooling Scale Sigmoid Slice Softmax Split TanH "
    "Threshold Tile RNN LSTM BinaryOp UnaryOp ConvolutionDepthWise Padding Squeeze ExpandDims "
    "Normalize Permute PriorBox DetectionOutput Interp DeconvolutionDepthWise ShuffleChannel "
    "InstanceNorm Clip Reorg YoloDetectionOutput Quantize Dequantize Yolov3DetectionOutput "
    "PSROIPooling ROIAlign Packing Requantize Cast HardSigmoid SELU HardSwish Noop "
    "PixelShuffle DeepCopy Mish StatisticsPooling Swish Gemm GroupNorm LayerNorm Softplus GRU "
    "MultiHeadAttention GELU Convolution1D Pooling1D ConvolutionDepthWise1D Convolution3D "
    "ConvolutionDepthWise3D Pooling3D MatMul Deconvolution1D DeconvolutionDepthWise1D "
    "Deconvolution3D DeconvolutionDepthWise3D Einsum DeformableConv2D GLU Fold Unfold "
    "GridSample CumulativeSum CopyTo Erf Diag CELU Shrink RMSNorm Spectrogram "
    "InverseSpectrogram Flip SDPA RotaryEmbed"
).split()
