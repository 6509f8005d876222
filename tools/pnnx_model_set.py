"""Build ``tests/pnnx_models/``: small PyTorch models with seeded random weights, converted to
ncnn by the real pnnx, each checked against PyTorch with the ``ncnn`` wheel.

Maintainer tool: CI runs neither it nor anything needing torch or pnnx; its outputs are committed.
Run it from a separate environment, never the repository's venv::

    python3.11 -m venv ~/.venvs/pnnx
    ~/.venvs/pnnx/bin/pip install torch==2.13.0+cpu torchvision==0.28.0 pnnx ncnn numpy
    ~/.venvs/pnnx/bin/python tools/pnnx_model_set.py [--only vit gru_tagger ...] [--out DIR]

For each model: build it in torch (``torch.manual_seed``; norm statistics and affine params,
layer scales, class tokens and all-zero parameters randomised too), make a seeded input,
run torch for the expected output, trace it and convert the TorchScript file with the ``pnnx``
executable (``fp16=0``: fp32 weights), then run the ncnn wheel (CPU, fp32) on the result. A
model whose ncnn output is off by more than 1e-3 relative L2 error is reported and not written.

Writes ``<out>/<name>/`` (replaced whole): ``model.param`` / ``model.bin``; ``input.npy``
(``input1.npy``... for more inputs), each without the batch axis, as an ncnn blob; token ids are
int32 values; ``expected.npy`` (``expected1.npy``...): torch's float32 output without the batch
axis; ``meta.json``: blob names as the .param names them, shapes, layer counts, versions, what
the model is, and ncnn's error against torch. Deterministic: a re-run with the same versions
writes byte-identical files.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.library
from torch import nn
from torch.nn import functional as F

OUT = Path(__file__).resolve().parent.parent / "tests" / "pnnx_models"
SEED = 20261020
RTOL = 1e-3


def _import_torchvision() -> Any:
    """torchvision's pure-Python models, whatever its C extension (built for a CUDA torch, it
    fails to load with a CPU torch, and then its fake-op registrations raise on import)."""
    library: Any = torch.library
    real = library.register_fake

    def skip_torchvision_ops(op: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(op, str) and op.startswith("torchvision::"):
            return lambda fn: fn
        return real(op, *args, **kwargs)

    library.register_fake = skip_torchvision_ops
    try:
        import torchvision
    finally:
        library.register_fake = real
    return torchvision


tv = _import_torchvision()


# -- models written here (no torchvision definition) --------------------------------------------


class ConvBnSiLU(nn.Module):
    """YOLOv8's ``Conv``: conv, BatchNorm, SiLU."""

    def __init__(self, cin: int, cout: int, k: int = 1, s: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, s, k // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.silu(self.bn(self.conv(x)))


class YoloBottleneck(nn.Module):
    """Two 3x3 convs with a shortcut."""

    def __init__(self, c: int) -> None:
        super().__init__()
        self.cv1 = ConvBnSiLU(c, c, 3)
        self.cv2 = ConvBnSiLU(c, c, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.cv2(self.cv1(x))


class C2f(nn.Module):
    """YOLOv8's C2f: split in two, a chain of bottlenecks on one half, concat all."""

    def __init__(self, cin: int, cout: int, n: int = 1) -> None:
        super().__init__()
        self.c = cout // 2
        self.cv1 = ConvBnSiLU(cin, 2 * self.c)
        self.cv2 = ConvBnSiLU((2 + n) * self.c, cout)
        self.m = nn.ModuleList(YoloBottleneck(self.c) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = list(self.cv1(x).chunk(2, 1))
        y.extend(m(y[-1]) for m in self.m)
        return self.cv2(torch.cat(y, 1))


class SPPF(nn.Module):
    """Spatial pyramid pooling, fast: three chained 5x5 max pools, concatenated."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.cv1 = ConvBnSiLU(cin, cin // 2)
        self.cv2 = ConvBnSiLU(cin * 2, cout)
        self.m = nn.MaxPool2d(5, 1, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat((x, y1, y2, self.m(y2)), 1))


class YoloDetect(nn.Module):
    """YOLOv8's anchor-free head: box (DFL over ``reg_max`` bins) and class branches per level,
    decoded to (cx, cy, w, h) in pixels and class sigmoids: (4 + nc, anchors)."""

    def __init__(self, nc: int, channels: Sequence[int], strides: Sequence[int]) -> None:
        super().__init__()
        self.nc, self.reg_max, self.strides = nc, 8, list(strides)
        c2, c3 = 16, 16
        self.cv2 = nn.ModuleList(
            nn.Sequential(ConvBnSiLU(c, c2, 3), ConvBnSiLU(c2, c2, 3), nn.Conv2d(c2, 32, 1))
            for c in channels
        )
        self.cv3 = nn.ModuleList(
            nn.Sequential(ConvBnSiLU(c, c3, 3), ConvBnSiLU(c3, c3, 3), nn.Conv2d(c3, nc, 1))
            for c in channels
        )
        self.dfl = nn.Conv2d(self.reg_max, 1, 1, bias=False).requires_grad_(False)
        self.dfl.weight.data[:] = torch.arange(self.reg_max, dtype=torch.float).view(1, -1, 1, 1)

    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        no = self.nc + 4 * self.reg_max
        feats = [torch.cat((b(x), c(x)), 1) for x, b, c in zip(xs, self.cv2, self.cv3, strict=True)]
        anchors, strides = [], []
        for f, stride in zip(feats, self.strides, strict=True):
            h, w = f.shape[2:]
            sy, sx = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
            anchors.append(torch.stack((sx, sy), -1).view(-1, 2))
            strides.append(torch.full((h * w, 1), float(stride)))
        anchor = torch.cat(anchors).transpose(0, 1).unsqueeze(0)
        stride_t = torch.cat(strides).transpose(0, 1).unsqueeze(0)
        x = torch.cat([f.view(f.shape[0], no, -1) for f in feats], 2)
        box, cls = x.split((4 * self.reg_max, self.nc), 1)
        b, _, a = box.shape
        dist = self.dfl(box.view(b, 4, self.reg_max, a).transpose(2, 1).softmax(1)).view(b, 4, a)
        lt, rb = dist.chunk(2, 1)
        x1y1, x2y2 = anchor - lt, anchor + rb
        dbox = torch.cat(((x1y1 + x2y2) / 2, x2y2 - x1y1), 1) * stride_t
        return torch.cat((dbox, cls.sigmoid()), 1)


class TinyYolo(nn.Module):
    """A YOLOv8-style detector: conv/C2f backbone, SPPF, an FPN/PAN neck (Upsample, Concat)
    and the decoded two-level head."""

    def __init__(self, nc: int = 8) -> None:
        super().__init__()
        self.b1 = nn.Sequential(ConvBnSiLU(3, 8, 3, 2), ConvBnSiLU(8, 16, 3, 2), C2f(16, 16))
        self.b2 = nn.Sequential(ConvBnSiLU(16, 32, 3, 2), C2f(32, 32))
        self.b3 = nn.Sequential(ConvBnSiLU(32, 64, 3, 2), C2f(64, 64), SPPF(64, 64))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.n1 = C2f(96, 32)
        self.down = ConvBnSiLU(32, 32, 3, 2)
        self.n2 = C2f(96, 64)
        self.detect = YoloDetect(nc, (32, 64), (8, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p3 = self.b2(self.b1(x))
        p4 = self.b3(p3)
        n3 = self.n1(torch.cat((self.up(p4), p3), 1))
        n4 = self.n2(torch.cat((self.down(n3), p4), 1))
        return self.detect([n3, n4])


class SmallResNet(nn.Module):
    """ResNet-50's layout (stem, four stages of torchvision's Bottleneck, avgpool, fc), one
    block a stage and planes 8-16-32-64 instead of 64-128-256-512."""

    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        res = tv.models.resnet
        self.stem = nn.Sequential(
            nn.Conv2d(3, 16, 7, 2, 3, bias=False),
            nn.BatchNorm2d(16),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
        stages: list[nn.Module] = []
        cin = 16
        for planes, stride in ((8, 1), (16, 2), (32, 2), (64, 2)):
            cout = planes * res.Bottleneck.expansion
            down = nn.Sequential(res.conv1x1(cin, cout, stride), nn.BatchNorm2d(cout))
            stages.append(res.Bottleneck(cin, planes, stride, down))
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.stages(self.stem(x)), 1)
        return self.fc(torch.flatten(x, 1))


class Lraspp(nn.Module):
    """torchvision's LR-ASPP on a width-reduced dilated MobileNetV3-Large; the ``out`` tensor."""

    def __init__(self, classes: int = 5) -> None:
        super().__init__()
        backbone = tv.models.mobilenet_v3_large(width_mult=0.25, dilated=True).features
        stages = [0] + [i for i, b in enumerate(backbone) if getattr(b, "_is_cn", False)]
        low, high = stages[-3], len(backbone) - 1  # as _lraspp_mobilenetv3: C2 and C5
        getter = tv.models._utils.IntermediateLayerGetter(
            backbone, return_layers={str(low): "low", str(high): "high"}
        )
        self.net = tv.models.segmentation.lraspp.LRASPP(
            getter, backbone[low].out_channels, backbone[high].out_channels, classes, 32
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)["out"]


class UNetGN(nn.Module):
    """A small UNet: conv/GroupNorm/SiLU pairs, max-pool down, bilinear ``F.interpolate`` up to
    each skip's size, concat, and the logits resized to the input's size."""

    def __init__(self, classes: int = 4) -> None:
        super().__init__()

        def pair(cin: int, cout: int) -> nn.Sequential:
            return nn.Sequential(
                nn.Conv2d(cin, cout, 3, padding=1),
                nn.GroupNorm(4, cout),
                nn.SiLU(),
                nn.Conv2d(cout, cout, 3, padding=1),
                nn.GroupNorm(4, cout),
                nn.SiLU(),
            )

        self.e1, self.e2, self.mid = pair(3, 16), pair(16, 32), pair(32, 48)
        self.d2, self.d1 = pair(48 + 32, 32), pair(32 + 16, 16)
        self.head = nn.Conv2d(16, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.avg_pool2d(x, 2)  # work at half resolution, as segmenters do
        e1 = self.e1(s)
        e2 = self.e2(F.max_pool2d(e1, 2))
        m = self.mid(F.max_pool2d(e2, 2))
        up2 = F.interpolate(m, size=e2.shape[-2:], mode="bilinear", align_corners=False)
        d2 = self.d2(torch.cat((up2, e2), 1))
        up1 = F.interpolate(d2, size=e1.shape[-2:], mode="bilinear", align_corners=False)
        d1 = self.d1(torch.cat((up1, e1), 1))
        return F.interpolate(self.head(d1), size=x.shape[-2:], mode="bilinear")


class WindowAttention(nn.Module):
    """Swin's (shifted) window attention on a (1, H, W, C) map: roll, window partition, qkv,
    relative position bias, the shift mask, softmax, merge, roll back. Written with tensors of
    at most 5 dims (batch included): torchvision's 6-D ``view`` has no ncnn Reshape."""

    index: torch.Tensor
    mask: torch.Tensor

    def __init__(self, dim: int, heads: int, ws: int, shift: int, hw: int) -> None:
        super().__init__()
        self.heads, self.ws, self.shift = heads, ws, shift
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.table = nn.Parameter(torch.randn((2 * ws - 1) ** 2, heads) * 0.5)
        coords = torch.flatten(
            torch.stack(torch.meshgrid(*[torch.arange(ws)] * 2, indexing="ij")), 1
        )
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + ws - 1
        self.register_buffer("index", (rel[..., 0] * (2 * ws - 1) + rel[..., 1]).flatten())
        n, nw = ws * ws, (hw // ws) ** 2
        mask = torch.zeros(nw, n, n)
        if shift:
            region = torch.zeros(hw, hw)
            cuts = (slice(0, -ws), slice(-ws, -shift), slice(-shift, None))
            for i, (hs, wsl) in enumerate((a, b) for a in cuts for b in cuts):
                region[hs, wsl] = i
            win = region.view(hw // ws, ws, hw // ws, ws).permute(0, 2, 1, 3).reshape(nw, n)
            diff = win[:, None, :] - win[:, :, None]
            mask = diff.masked_fill(diff != 0, -100.0)
        self.register_buffer("mask", mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        ws, heads, n = self.ws, self.heads, self.ws * self.ws
        nh, nw = h // ws, w // ws
        if self.shift:
            x = torch.roll(x, (-self.shift, -self.shift), (1, 2))
        x = x.reshape(b, nh, ws, nw, ws * c).permute(0, 1, 3, 2, 4).reshape(b, nh * nw, n, c)
        q, k, v = self.qkv(x).chunk(3, -1)
        q, k, v = (
            t.reshape(b, nh * nw, n, heads, -1).permute(0, 1, 3, 2, 4).reshape(b, -1, n, c // heads)
            for t in (q, k, v)
        )
        attn = (q * (c // heads) ** -0.5) @ k.transpose(-2, -1)
        bias = self.table[self.index].view(n, n, heads).permute(2, 0, 1)
        attn = attn.view(b, nh * nw, heads, n, n) + bias.unsqueeze(0) + self.mask.unsqueeze(1)
        attn = attn.softmax(-1).view(b, -1, n, n)
        y = (attn @ v).view(b, nh * nw, heads, n, -1).permute(0, 1, 3, 2, 4)
        y = self.proj(y.reshape(b, nh * nw, n, c))
        y = y.reshape(b, nh, nw, ws, ws * c).permute(0, 1, 3, 2, 4).reshape(b, h, w, c)
        if self.shift:
            y = torch.roll(y, (self.shift, self.shift), (1, 2))
        return y


class SwinBlock(nn.Module):
    """Pre-norm (shifted) window attention and a GELU MLP, both residual."""

    def __init__(self, dim: int, heads: int, ws: int, shift: int, hw: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = WindowAttention(dim, heads, ws, shift, hw)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchMerging(nn.Module):
    """Swin's 2x2 patch merging (LayerNorm, Linear 4C -> 2C), the 2x2 gather as a reshape and
    permute (pnnx has no ncnn op for torchvision's step-2 slices)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(4 * dim)
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, h, w, c = x.shape
        x = x.reshape(b, h // 2, 2, w // 2, 2 * c).permute(0, 1, 3, 2, 4)
        return self.reduction(self.norm(x.reshape(b, h // 2, w // 2, 4 * c)))


class SwinTiny(nn.Module):
    """A Swin-T-style classifier: 4x4 patch embedding and LayerNorm, two blocks (plain and
    shifted windows) at dim 16, PatchMerging, two blocks at dim 32, LayerNorm, mean, head."""

    def __init__(self, classes: int = 10, ws: int = 4) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, 16, 4, 4)
        self.embed_norm = nn.LayerNorm(16)
        self.stage1 = nn.Sequential(SwinBlock(16, 2, ws, 0, 16), SwinBlock(16, 2, ws, 2, 16))
        self.merge = PatchMerging(16)
        self.stage2 = nn.Sequential(SwinBlock(32, 4, ws, 0, 8), SwinBlock(32, 4, ws, 2, 8))
        self.norm = nn.LayerNorm(32)
        self.head = nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed_norm(self.embed(x).permute(0, 2, 3, 1))
        x = self.stage2(self.merge(self.stage1(x)))
        return self.head(self.norm(x).mean((1, 2)))


class Crnn(nn.Module):
    """CRNN (text recognition): a VGG-like conv stack down to height 1, then two bidirectional
    LSTMs over the columns (sequence-first, as the original), each with its Linear."""

    def __init__(self, classes: int = 12) -> None:
        super().__init__()

        def block(cin: int, cout: int, pool: tuple[int, int]) -> list[nn.Module]:
            return [
                nn.Conv2d(cin, cout, 3, 1, 1, bias=False),
                nn.BatchNorm2d(cout),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(pool, pool),
            ]

        self.cnn = nn.Sequential(
            *block(1, 16, (2, 2)), *block(16, 32, (2, 2)), *block(32, 48, (2, 1)),
            *block(48, 48, (4, 1)),
        )  # fmt: skip
        self.rnn1 = nn.LSTM(48, 24, bidirectional=True)
        self.fc1 = nn.Linear(48, 32)
        self.rnn2 = nn.LSTM(32, 24, bidirectional=True)
        self.fc2 = nn.Linear(48, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.cnn(x).squeeze(2).permute(2, 0, 1)  # (T, B, C)
        r, _ = self.rnn1(f)
        t, b, h = r.shape
        f = self.fc1(r.reshape(t * b, h)).view(t, b, -1)
        r, _ = self.rnn2(f)
        return self.fc2(r.reshape(t * b, h)).view(t, b, -1)


class GruTagger(nn.Module):
    """A sequence tagger: token Embedding, bidirectional GRU, Linear to tag logits."""

    def __init__(self, vocab: int = 50, tags: int = 6) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, 16)
        self.gru = nn.GRU(16, 24, batch_first=True, bidirectional=True)
        self.out = nn.Linear(48, tags)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h, _ = self.gru(self.embed(ids))
        return self.out(h)


class GptBlock(nn.Module):
    """A GPT-2-style decoder (nanoGPT's layout): token and position embeddings, one pre-norm
    block of causal self-attention and a GELU MLP, the final LayerNorm and the LM head. The
    causal mask is an explicit additive ``attn_mask`` (a buffer): with ``is_causal=True`` pnnx
    leaves ``F.scaled_dot_product_attention`` unconverted. No kv cache (pnnx writes none)."""

    mask: torch.Tensor

    def __init__(self, vocab: int = 64, n_embd: int = 32, n_head: int = 4, ctx: int = 16) -> None:
        super().__init__()
        self.n_head = n_head
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(ctx, n_embd)
        self.ln_1 = nn.LayerNorm(n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.attn_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.mlp_proj = nn.Linear(4 * n_embd, n_embd)
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.register_buffer("mask", torch.full((ctx, ctx), float("-inf")).triu(1))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        b, t = ids.shape
        x = self.wte(ids) + self.wpe(torch.arange(t))
        c = x.shape[-1]
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q = q.view(b, t, self.n_head, -1).transpose(1, 2)
        k = k.view(b, t, self.n_head, -1).transpose(1, 2)
        v = v.view(b, t, self.n_head, -1).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask[:t, :t])
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        x = x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))
        return self.lm_head(self.ln_f(x))


class Video3d(nn.Module):
    """An R3D-style video classifier: Conv3d stem, MaxPool3d, two stages of torchvision's video
    BasicBlock (Conv3DSimple) with planes 8 and 16, AvgPool3d, AdaptiveAvgPool3d, fc."""

    def __init__(self, classes: int = 7) -> None:
        super().__init__()
        vr = tv.models.video.resnet
        self.stem = nn.Sequential(
            nn.Conv3d(3, 8, (3, 5, 5), (1, 2, 2), (1, 2, 2), bias=False),
            nn.BatchNorm3d(8),
            nn.ReLU(inplace=True),
            nn.MaxPool3d((1, 3, 3), (1, 2, 2), (0, 1, 1)),
        )
        down = nn.Sequential(nn.Conv3d(8, 16, 1, 2, bias=False), nn.BatchNorm3d(16))
        self.layers = nn.Sequential(
            vr.BasicBlock(8, 8, vr.Conv3DSimple),
            vr.BasicBlock(8, 16, vr.Conv3DSimple, 2, down),
            nn.AvgPool3d((1, 2, 2), (1, 2, 2)),
        )
        self.fc = nn.Linear(16, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool3d(self.layers(self.stem(x)), 1)
        return self.fc(torch.flatten(x, 1))


def _sinusoids(length: int, channels: int) -> torch.Tensor:
    """Whisper's positional embedding."""
    inc = math.log(10000) / (channels // 2 - 1)
    inv = torch.exp(-inc * torch.arange(channels // 2))
    t = torch.arange(length)[:, None] * inv[None, :]
    return torch.cat([torch.sin(t), torch.cos(t)], dim=1)


class WhisperAttention(nn.Module):
    """Whisper's MultiHeadAttention: q/k/v Linear (k without bias), both sides scaled by
    ``head_dim ** -0.25``, softmax, out Linear."""

    def __init__(self, n_state: int, n_head: int) -> None:
        super().__init__()
        self.n_head = n_head
        self.query = nn.Linear(n_state, n_state)
        self.key = nn.Linear(n_state, n_state, bias=False)
        self.value = nn.Linear(n_state, n_state)
        self.out = nn.Linear(n_state, n_state)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.query(x), self.key(x), self.value(x)
        scale = (x.shape[-1] // self.n_head) ** -0.25
        q = q.view(*q.shape[:2], self.n_head, -1).permute(0, 2, 1, 3) * scale
        k = k.view(*k.shape[:2], self.n_head, -1).permute(0, 2, 3, 1) * scale
        v = v.view(*v.shape[:2], self.n_head, -1).permute(0, 2, 1, 3)
        w = (q @ k).softmax(dim=-1)
        return self.out((w @ v).permute(0, 2, 1, 3).flatten(start_dim=2))


class AudioEncoder(nn.Module):
    """A Whisper-style audio encoder: log-mel frames through a Conv1d/GELU stack (the second
    conv strided), sinusoidal positions, one residual attention block, ``ln_post``."""

    positional_embedding: torch.Tensor

    def __init__(self, n_mels: int = 16, n_state: int = 32, n_head: int = 4, frames: int = 64):
        super().__init__()
        self.conv1 = nn.Conv1d(n_mels, n_state, 3, padding=1)
        self.conv2 = nn.Conv1d(n_state, n_state, 3, stride=2, padding=1)
        self.register_buffer("positional_embedding", _sinusoids(frames // 2, n_state))
        self.attn_ln = nn.LayerNorm(n_state)
        self.attn = WhisperAttention(n_state, n_head)
        self.mlp_ln = nn.LayerNorm(n_state)
        self.mlp = nn.Sequential(
            nn.Linear(n_state, 4 * n_state), nn.GELU(), nn.Linear(4 * n_state, n_state)
        )
        self.ln_post = nn.LayerNorm(n_state)

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        x = F.gelu(self.conv2(F.gelu(self.conv1(mel)))).permute(0, 2, 1)
        x = x + self.positional_embedding
        x = x + self.attn(self.attn_ln(x))
        x = x + self.mlp(self.mlp_ln(x))
        return self.ln_post(x)


# -- the set -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One model of the set: how to build it, and the shapes of its inputs (batch 1)."""

    name: str
    what: str
    build: Callable[[], nn.Module]
    shapes: tuple[tuple[int, ...], ...]
    token_ids: int = 0  # > 0: the inputs are token ids below this
    #: pnnx's ``inputshape2``: a second size makes the sizes that differ shape expressions
    shapes2: tuple[tuple[int, ...], ...] = ()


CASES = [
    Case(
        "mobilenetv3_small",
        "torchvision mobilenet_v3_small(width_mult=0.5, num_classes=100): Hardswish, SE blocks"
        " (AdaptiveAvgPool, Hardsigmoid scale), BatchNorm folded, Linear classifier",
        lambda: tv.models.mobilenet_v3_small(width_mult=0.5, num_classes=100),
        ((1, 3, 64, 64),),
    ),
    Case(
        "resnet_bottleneck",
        "ResNet-50 layout with torchvision's Bottleneck, one block a stage, planes 8-16-32-64",
        SmallResNet,
        ((1, 3, 64, 64),),
    ),
    Case(
        "yolo_detector",
        "YOLOv8-style detector: Conv-BN-SiLU, C2f (chunk/concat), SPPF, nearest Upsample and"
        " Concat neck, DFL head decoded to (cx, cy, w, h) and class sigmoids over 80 anchors",
        TinyYolo,
        ((1, 3, 64, 64),),
    ),
    Case(
        "lraspp_segmenter",
        "torchvision LR-ASPP head on mobilenet_v3_large(width_mult=0.25, dilated=True), 5"
        " classes, inter_channels 32: sigmoid attention branch, bilinear F.interpolate to the"
        " low-level size and to the input size (converted with a second input size: Interp"
        " sizes as expressions of a reference blob)",
        Lraspp,
        ((1, 3, 64, 64),),
        shapes2=((1, 3, 96, 80),),
    ),
    Case(
        "unet_groupnorm",
        "small UNet segmenter: Conv/GroupNorm/SiLU, max-pool down, bilinear F.interpolate to"
        " each skip's size (from .shape) and to the input's size, 4 classes (converted with a"
        " second input size: Interp sizes as expressions of a reference blob)",
        UNetGN,
        ((1, 3, 48, 40),),
        shapes2=((1, 3, 64, 56),),
    ),
    Case(
        "vit",
        "torchvision VisionTransformer(image_size=64, patch_size=16, 2 layers, 4 heads,"
        " hidden 32, mlp 64, 10 classes): conv patch embedding, class token, nn.MultiheadAttention,"
        " LayerNorm, GELU",
        lambda: tv.models.VisionTransformer(64, 16, 2, 4, 32, 64, num_classes=10),
        ((1, 3, 64, 64),),
    ),
    Case(
        "swin",
        "Swin-T-style classifier (written here) on 3x64x64: 4x4 patch embedding, window 4x4"
        " attention blocks at dims 16 and 32 (2 and 4 heads), every second one shifted (torch.roll"
        " and the -100 shift mask), relative position bias, PatchMerging, 10 classes. Tensors"
        " are at most 5-D: torchvision's SwinTransformer does not convert (pnnx leaves its 6-D"
        " Tensor.reshape and PatchMerging's step-2 Tensor.slice as unknown layers)",
        SwinTiny,
        ((1, 3, 64, 64),),
    ),
    Case(
        "convnext",
        "torchvision ConvNeXt with stages 16-32-64 (2, 2, 1 blocks): depthwise 7x7, permute to"
        " channels-last, LayerNorm, Linear on rank-4 tensors, GELU, layer scale; LayerNorm2d"
        " downsampling, 10 classes",
        lambda: tv.models.convnext.ConvNeXt(
            [
                tv.models.convnext.CNBlockConfig(16, 32, 2),
                tv.models.convnext.CNBlockConfig(32, 64, 2),
                tv.models.convnext.CNBlockConfig(64, None, 1),
            ],
            num_classes=10,
        ),
        ((1, 3, 64, 64),),
    ),
    Case(
        "crnn",
        "CRNN text recogniser: Conv/BN/ReLU/MaxPool stack to height 1 on a 1x32x64 image, two"
        " bidirectional sequence-first LSTMs with Linear, 16 steps x 12 classes",
        Crnn,
        ((1, 1, 32, 64),),
    ),
    Case(
        "gru_tagger",
        "sequence tagger: Embedding(50, 16), bidirectional GRU(16, 24), Linear to 6 tags; input"
        " 12 token ids",
        GruTagger,
        ((1, 12),),
        token_ids=50,
    ),
    Case(
        "gpt_block",
        "GPT-2-style decoder: token + position Embedding, one block (LayerNorm, causal"
        " F.scaled_dot_product_attention with 4 heads, GELU MLP), ln_f, LM head over 64 tokens;"
        " causal mask as an explicit attn_mask; input 16 token ids, no kv cache",
        GptBlock,
        ((1, 16),),
        token_ids=64,
    ),
    Case(
        "video_r3d",
        "R3D-style video classifier on 3x8x32x32 clips: Conv3d, BatchNorm3d, MaxPool3d,"
        " torchvision video BasicBlocks, AvgPool3d, AdaptiveAvgPool3d, Linear",
        Video3d,
        ((1, 3, 8, 32, 32),),
    ),
    Case(
        "whisper_audio",
        "Whisper-style audio encoder on 16 mel x 64 frames: Conv1d/GELU stack (stride 2),"
        " sinusoidal positions, one residual attention block (4 heads, manual q/k scaling and"
        " softmax), GELU MLP, LayerNorm",
        AudioEncoder,
        ((1, 16, 64),),
    ),
]


# -- building, converting, checking --------------------------------------------------------------


def randomise(model: nn.Module, seed: int) -> None:
    """Random norm statistics and affine params, layer scales, class tokens and every all-zero
    parameter, so that no normalisation, scale or bias is an identity or zero."""
    g = torch.Generator().manual_seed(seed)
    norms = (nn.BatchNorm2d, nn.BatchNorm3d, nn.LayerNorm, nn.GroupNorm)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, norms) and m.weight is not None:
                m.weight.copy_(torch.rand(m.weight.shape, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(m.bias.shape, generator=g) * 0.1)
            if isinstance(m, nn.BatchNorm2d | nn.BatchNorm3d):
                assert m.running_mean is not None and m.running_var is not None
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
        for name, p in model.named_parameters():
            if name.endswith(("layer_scale", "class_token")):
                p.copy_(torch.rand(p.shape, generator=g) * 0.5 + 0.5)
            elif not p.any():  # zero-initialised: biases, ViT's classifier head
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def make_inputs(case: Case, seed: int, shapes: Sequence[Sequence[int]]) -> list[torch.Tensor]:
    """Seeded inputs: token ids (int64) or normal floats."""
    g = torch.Generator().manual_seed(seed)
    if case.token_ids:
        return [torch.randint(0, case.token_ids, tuple(s), generator=g) for s in shapes]
    return [torch.randn(tuple(s), generator=g) for s in shapes]


def pnnx_convert(
    model: nn.Module, inputs: list[torch.Tensor], inputs2: list[torch.Tensor], work: Path
) -> tuple[str, str]:
    """Trace ``model``, convert it with the pnnx executable (fp32 weights; ``inputs2``, if
    any, as ``inputshape2``): the command and the log."""
    import pnnx
    from pnnx.utils.utils import generate_inputs_arg, get_shape_from_inputs, get_type_from_inputs

    # no re-trace check: nn.MultiheadAttention traces its fast path only under no_grad
    traced = torch.jit.trace(model, tuple(inputs), check_trace=False)
    traced.save(str(work / "model.pt"))
    shapes = generate_inputs_arg(get_shape_from_inputs(inputs), get_type_from_inputs(inputs))
    command = [pnnx.EXEC_PATH, "model.pt", f"inputshape={shapes}", "fp16=0", "device=cpu"]
    if inputs2:
        shapes2 = generate_inputs_arg(get_shape_from_inputs(inputs2), get_type_from_inputs(inputs2))
        command.append(f"inputshape2={shapes2}")
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, check=False)
    log = done.stdout + done.stderr
    if done.returncode != 0 or not (work / "model.ncnn.param").exists():
        raise RuntimeError(f"pnnx failed ({done.returncode}):\n{log[-3000:]}")
    return " ".join(command[1:]), log


def describe_param(path: Path) -> dict[str, Any]:
    """Layer and blob counts, per-type layer counts, graph inputs and outputs."""
    lines = path.read_text().splitlines()
    layers, blobs = (int(v) for v in lines[1].split())
    counts: dict[str, int] = {}
    produced: list[str] = []
    consumed: set[str] = set()
    inputs: list[str] = []
    for line in lines[2:]:
        tok = line.split()
        kind, n_in, n_out = tok[0], int(tok[2]), int(tok[3])
        counts[kind] = counts.get(kind, 0) + 1
        consumed.update(tok[4 : 4 + n_in])
        tops = tok[4 + n_in : 4 + n_in + n_out]
        produced += tops
        if kind == "Input":
            inputs += tops
    return {
        "layers": layers,
        "blobs": blobs,
        "layer_counts": dict(sorted(counts.items())),
        "inputs": inputs,
        "outputs": [b for b in produced if b not in consumed],
    }


def ncnn_run(
    param: Path, weights: Path, feeds: dict[str, np.ndarray], outputs: list[str]
) -> list[np.ndarray]:
    """The ncnn wheel's CPU fp32 outputs; int32 arrays go in as their bits (ncnn's ids)."""
    import ncnn

    net = ncnn.Net()
    for flag in ("use_fp16_packed", "use_fp16_storage", "use_fp16_arithmetic"):
        setattr(net.opt, flag, False)
    net.opt.use_bf16_storage = False
    net.opt.use_vulkan_compute = False
    net.opt.num_threads = 1
    if net.load_param(str(param)) != 0 or net.load_model(str(weights)) != 0:
        raise RuntimeError("ncnn cannot load the model")
    result = []
    for name in outputs:
        ex = net.create_extractor()
        for blob, array in feeds.items():
            bits = array.view(np.float32) if array.dtype == np.int32 else array
            ex.input(blob, ncnn.Mat(np.ascontiguousarray(bits, np.float32)).clone())
        status, mat = ex.extract(name)
        if status != 0:
            raise RuntimeError(f"ncnn cannot extract {name} (status {status})")
        result.append(np.array(mat, np.float32, copy=True))
        del mat, ex
    net.clear()
    return result


def rel_l2(ours: np.ndarray, ref: np.ndarray) -> float:
    """``|ours - ref| / |ref|`` in float64 (infinite for a shape mismatch)."""
    if ours.shape != ref.shape:
        return math.inf
    diff = np.linalg.norm(ours.astype(np.float64) - ref.astype(np.float64))
    return float(diff / max(float(np.linalg.norm(ref.astype(np.float64))), 1e-30))


def torch_run(
    model: nn.Module, inputs: list[torch.Tensor], case: Case
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The inputs as ncnn blobs (no batch axis; ids int32) and torch's outputs (the same)."""
    with torch.no_grad():
        result = model(*inputs)
    expected = [t.detach().float().squeeze(0).numpy() for t in _as_list(result)]
    if not all(np.isfinite(e).all() and e.std() > 0 for e in expected):
        raise RuntimeError("torch's output is constant or not finite: nothing to check")
    dtype = np.int32 if case.token_ids else np.float32
    return [t.squeeze(0).numpy().astype(dtype) for t in inputs], expected


def build_case(case: Case, out: Path) -> dict[str, Any]:
    """Build, convert and check one model; write its folder when ncnn matches torch."""
    import pnnx

    torch.manual_seed(SEED)
    model = case.build().eval()
    randomise(model, SEED + 1)
    inputs = make_inputs(case, SEED + 2, case.shapes)
    inputs2 = make_inputs(case, SEED + 3, case.shapes2)
    feeds_np, expected = torch_run(model, inputs, case)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        command, log = pnnx_convert(model, inputs, inputs2, work)
        info = describe_param(work / "model.ncnn.param")
        if len(info["inputs"]) != len(inputs) or len(info["outputs"]) != len(expected):
            raise RuntimeError(f"blobs {info['inputs']} -> {info['outputs']}: not the model's")
        files = (work / "model.ncnn.param", work / "model.ncnn.bin")
        feeds = dict(zip(info["inputs"], feeds_np, strict=True))
        got = ncnn_run(*files, feeds, info["outputs"])
        errors = [rel_l2(g, e) for g, e in zip(got, expected, strict=True)]
        shapes = {n: list(g.shape) for n, g in zip(info["outputs"], got, strict=True)}
        report: dict[str, Any] = {"name": case.name, "ncnn_rel_l2": errors, "ncnn_shapes": shapes}
        if inputs2:  # the second size, through the shape expressions
            feeds2_np, expected2 = torch_run(model, inputs2, case)
            got2 = ncnn_run(
                *files, dict(zip(info["inputs"], feeds2_np, strict=True)), info["outputs"]
            )
            report["ncnn_rel_l2_shape2"] = [
                rel_l2(g, e) for g, e in zip(got2, expected2, strict=True)
            ]
            errors = errors + report["ncnn_rel_l2_shape2"]
        if not all(e <= RTOL for e in errors):
            report["written"] = False
            return report
        folder = out / case.name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        shutil.copyfile(work / "model.ncnn.param", folder / "model.param")
        shutil.copyfile(work / "model.ncnn.bin", folder / "model.bin")
    input_files = [f"input{i or ''}.npy" for i in range(len(feeds_np))]
    output_files = [f"expected{i or ''}.npy" for i in range(len(expected))]
    for name, array in zip(input_files, feeds_np, strict=True):
        np.save(folder / name, array)
    for name, array in zip(output_files, expected, strict=True):
        np.save(folder / name, array)
    meta = {
        "name": case.name,
        "description": case.what,
        "inputs": [
            {
                "blob": blob,
                "file": file,
                "shape": list(a.shape),
                "dtype": str(a.dtype),
                "kind": "token ids" if case.token_ids else "float",
            }
            for blob, file, a in zip(info["inputs"], input_files, feeds_np, strict=True)
        ],
        "outputs": [
            {"blob": blob, "file": file, "shape": list(a.shape)}
            for blob, file, a in zip(info["outputs"], output_files, expected, strict=True)
        ],
        "torch_input_shapes": [list(s) for s in case.shapes],
        "pnnx_inputshape2": [list(s) for s in case.shapes2],
        "layers": info["layers"],
        "blobs": info["blobs"],
        "layer_counts": info["layer_counts"],
        "ncnn_rel_l2": report["ncnn_rel_l2"],
        "ncnn_rel_l2_shape2": report.get("ncnn_rel_l2_shape2", []),
        "seed": SEED,
        "torch": torch.__version__,
        "torchvision": tv.__version__,
        "pnnx": pnnx.__version__,
        "pnnx_command": command,
        "files": {},
    }
    meta["files"] = {p.name: p.stat().st_size for p in sorted(folder.iterdir())}
    (folder / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    report.update(written=True, bytes=sum(meta["files"].values()), pnnx_log_tail=log[-400:])
    return report


def _as_list(result: Any) -> list[torch.Tensor]:
    return list(result) if isinstance(result, tuple | list) else [result]


def main(argv: list[str] | None = None) -> int:
    """Build the set (or ``--only`` some models); print one JSON report line per model."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*", help="model names (default: all)")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    names = {c.name for c in CASES}
    unknown = set(args.only or ()) - names
    if unknown:
        parser.error(f"unknown models {sorted(unknown)}; known: {sorted(names)}")
    failed = 0
    for case in CASES:
        if args.only and case.name not in args.only:
            continue
        try:
            report = build_case(case, args.out)
        except Exception as exc:  # one model's failure is reported, the rest still built
            report = {"name": case.name, "written": False, "error": f"{type(exc).__name__}: {exc}"}
        failed += not report["written"]
        report.pop("pnnx_log_tail", None)
        print(json.dumps(report), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
