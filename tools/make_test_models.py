"""Build the test models: plain ``torch.nn`` networks with seeded random weights, converted to
ncnn by pnnx, with an input and PyTorch's output saved beside them.

Maintainer tool: CI runs neither it nor anything needing torch or pnnx; its outputs are committed.
Run it outside the repository's venv (no install inside the work tree)::

    pip install torch==2.13.0 pnnx==20261020 ncnn==1.0.20261020   # CPU torch build
    python tools/make_test_models.py [--only squeezenet rrdb ...] [--out DIR]
    python tools/check_models_with_ncnn.py                          # ncnn wheel vs PyTorch

Writes ``tests/models/<name>/`` (the folder is replaced whole):

* ``model.param`` / ``model.bin``: pnnx's default conversion, fp16 weights;
* ``model_fp32.param`` / ``model_fp32.bin``: pnnx ``fp16=0``, only for the small models
  (``rrdb``, ``cunet``): the whole of ``tests/models`` must stay under 30 MB, as the repository
  travels to the device machine under a 64 MB limit (ShuffleNetV2's fp32 copy alone is 5.5 MB);
* ``input.npy``: the seeded input, float32 CHW (no batch dimension);
* ``output.npy``: PyTorch's float32 output for it, batch dimension removed;
* ``meta.json``: blob names (pnnx's ``in0`` / ``out0``, checked against the .param), shapes,
  layer and blob counts, per-type layer counts and param ids, file sizes, torch / pnnx versions.

Deterministic: every weight comes from ``torch.manual_seed(SEED)`` (BatchNorm running stats and
affine params are randomised too, so BN is not an identity), the input from a seeded numpy
generator; re-running with the same torch / pnnx versions rewrites byte-identical files
(checked with ``--out /tmp/x`` and ``cmp``). ResNet-18 has every channel width halved (its fp16
weights would be 23 MB at full width); all other architectures are at their original widths.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

ROOT = Path(__file__).resolve().parent.parent / "tests" / "models"
SEED = 7767517


def describe_param(path: Path) -> dict[str, Any]:
    """Layer and blob counts, per-type layer counts and param ids, graph inputs and outputs."""
    lines = path.read_text().splitlines()
    layers, blobs = (int(v) for v in lines[1].split())
    counts: dict[str, int] = {}
    ids: dict[str, set[int]] = {}
    produced: list[str] = []
    consumed: set[str] = set()
    inputs: list[str] = []
    for line in lines[2:]:
        tok = line.split()
        kind, n_in, n_out = tok[0], int(tok[2]), int(tok[3])
        bottoms, tops = tok[4 : 4 + n_in], tok[4 + n_in : 4 + n_in + n_out]
        counts[kind] = counts.get(kind, 0) + 1
        ids.setdefault(kind, set()).update(int(kv.split("=")[0]) for kv in tok[4 + n_in + n_out :])
        consumed.update(bottoms)
        produced += tops
        if kind == "Input":
            inputs += tops
    return {
        "layers": layers,
        "blobs": blobs,
        "counts": dict(sorted(counts.items())),
        "param_ids": {k: sorted(v) for k, v in sorted(ids.items())},
        "inputs": inputs,
        "outputs": [b for b in produced if b not in consumed],
    }


def _randomise_bn(model: nn.Module, seed: int) -> None:
    """Random BatchNorm statistics and affine params, so BN is not an identity."""
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            n = m.num_features
            m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
            m.weight.data.copy_(torch.rand(n, generator=g) * 0.5 + 0.75)
            m.bias.data.copy_(torch.randn(n, generator=g) * 0.1)


# -- SqueezeNet 1.1 -------------------------------------------------------------------------------


class Fire(nn.Module):
    def __init__(self, cin: int, squeeze: int, e1: int, e3: int) -> None:
        super().__init__()
        self.squeeze = nn.Conv2d(cin, squeeze, 1)
        self.expand1x1 = nn.Conv2d(squeeze, e1, 1)
        self.expand3x3 = nn.Conv2d(squeeze, e3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.squeeze(x))
        return torch.cat([F.relu(self.expand1x1(x)), F.relu(self.expand3x3(x))], 1)


class SqueezeNet11(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 64, 3, stride=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(64, 16, 64, 64),
            Fire(128, 16, 64, 64),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(128, 32, 128, 128),
            Fire(256, 32, 128, 128),
            nn.MaxPool2d(3, 2, ceil_mode=True),
            Fire(256, 48, 192, 192),
            Fire(384, 48, 192, 192),
            Fire(384, 64, 256, 256),
            Fire(512, 64, 256, 256),
        )
        self.classifier = nn.Sequential(
            nn.Dropout(0.5),
            nn.Conv2d(512, classes, 1),
            nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d(1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(self.classifier(self.features(x)), 1)


# -- MobileNetV2 ---------------------------------------------------------------------------------


def _conv_bn(
    cin: int, cout: int, k: int, s: int, groups: int = 1, act: bool = True
) -> nn.Sequential:
    layers: list[nn.Module] = [
        nn.Conv2d(cin, cout, k, s, (k - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(cout),
    ]
    if act:
        layers.append(nn.ReLU6(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        self.use_res = stride == 1 and cin == cout
        layers: list[nn.Module] = []
        if expand != 1:
            layers.append(_conv_bn(cin, hidden, 1, 1))
        layers += [
            _conv_bn(hidden, hidden, 3, stride, groups=hidden),
            _conv_bn(hidden, cout, 1, 1, act=False),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_res else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        setting = [
            (1, 16, 1, 1),
            (6, 24, 2, 2),
            (6, 32, 3, 2),
            (6, 64, 4, 2),
            (6, 96, 3, 1),
            (6, 160, 3, 2),
            (6, 320, 1, 1),
        ]
        layers: list[nn.Module] = [_conv_bn(3, 32, 3, 2)]
        cin = 32
        for t, c, n, s in setting:
            for i in range(n):
                layers.append(InvertedResidual(cin, c, s if i == 0 else 1, t))
                cin = c
        layers.append(_conv_bn(cin, 1280, 1, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(torch.flatten(x, 1))


# -- ResNet-18 (channel widths halved to keep the repository small) -------------------------------


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.down is None else self.down(x)
        out = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(out)) + identity)


class ResNet18(nn.Module):
    def __init__(self, width: int = 32, classes: int = 1000) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        blocks = []
        cin = width
        for i, c in enumerate([width, width * 2, width * 4, width * 8]):
            stride = 1 if i == 0 else 2
            blocks += [BasicBlock(cin, c, stride), BasicBlock(c, c, 1)]
            cin = c
        self.layers = nn.Sequential(*blocks)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = F.adaptive_avg_pool2d(self.layers(x), 1)
        return self.fc(torch.flatten(x, 1))


# -- ShuffleNetV2 x0.5 -----------------------------------------------------------------------------


def _shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    b, c, h, w = x.shape
    return x.view(b, groups, c // groups, h, w).transpose(1, 2).reshape(b, c, h, w)


class ShuffleUnit(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.stride = stride
        branch = cout // 2
        if stride > 1:
            self.branch1 = nn.Sequential(
                nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False),
                nn.BatchNorm2d(cin),
                nn.Conv2d(cin, branch, 1, bias=False),
                nn.BatchNorm2d(branch),
                nn.ReLU(inplace=True),
            )
        src = cin if stride > 1 else branch
        self.branch2 = nn.Sequential(
            nn.Conv2d(src, branch, 1, bias=False),
            nn.BatchNorm2d(branch),
            nn.ReLU(inplace=True),
            nn.Conv2d(branch, branch, 3, stride, 1, groups=branch, bias=False),
            nn.BatchNorm2d(branch),
            nn.Conv2d(branch, branch, 1, bias=False),
            nn.BatchNorm2d(branch),
            nn.ReLU(inplace=True),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), 1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), 1)
        return _shuffle(out, 2)


class ShuffleNetV2(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        channels = [24, 48, 96, 192, 1024]
        self.conv1 = nn.Sequential(
            nn.Conv2d(3, 24, 3, 2, 1, bias=False), nn.BatchNorm2d(24), nn.ReLU(inplace=True)
        )
        stages = []
        cin = 24
        for repeats, cout in zip([4, 8, 4], channels[1:4], strict=True):
            stages.append(ShuffleUnit(cin, cout, 2))
            stages += [ShuffleUnit(cout, cout, 1) for _ in range(repeats - 1)]
            cin = cout
        self.stages = nn.Sequential(*stages)
        self.conv5 = nn.Sequential(
            nn.Conv2d(cin, channels[4], 1, bias=False),
            nn.BatchNorm2d(channels[4]),
            nn.ReLU(inplace=True),
        )
        self.fc = nn.Linear(channels[4], classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(self.conv1(x), 3, 2, 1)
        x = self.conv5(self.stages(x))
        return self.fc(x.mean([2, 3]))


# -- ESRGAN-style RRDB net -----------------------------------------------------------------------


class RDB(nn.Module):
    def __init__(self, nf: int, gc: int) -> None:
        super().__init__()
        self.convs = nn.ModuleList(
            [nn.Conv2d(nf + i * gc, gc if i < 4 else nf, 3, 1, 1) for i in range(5)]
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feats = [x]
        for i, conv in enumerate(self.convs):
            out = conv(torch.cat(feats, 1))
            if i < 4:
                feats.append(F.leaky_relu(out, 0.2))
        return out * 0.2 + x


class RRDB(nn.Module):
    def __init__(self, nf: int, gc: int) -> None:
        super().__init__()
        self.rdbs = nn.Sequential(RDB(nf, gc), RDB(nf, gc), RDB(nf, gc))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.rdbs(x) * 0.2 + x


class RRDBNet(nn.Module):
    def __init__(self, nf: int = 16, gc: int = 8, blocks: int = 20) -> None:
        super().__init__()
        self.conv_first = nn.Conv2d(3, nf, 3, 1, 1)
        self.body = nn.Sequential(*[RRDB(nf, gc) for _ in range(blocks)])
        self.conv_body = nn.Conv2d(nf, nf, 3, 1, 1)
        self.up1 = nn.Conv2d(nf, nf, 3, 1, 1)
        self.up2 = nn.Conv2d(nf, nf, 3, 1, 1)
        self.conv_hr = nn.Conv2d(nf, nf, 3, 1, 1)
        self.conv_last = nn.Conv2d(nf, 3, 3, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        feat = self.conv_first(x)
        feat = feat + self.conv_body(self.body(feat))
        feat = F.leaky_relu(self.up1(F.interpolate(feat, scale_factor=2.0, mode="nearest")), 0.2)
        feat = F.leaky_relu(self.up2(F.interpolate(feat, scale_factor=2.0, mode="nearest")), 0.2)
        return self.conv_last(F.leaky_relu(self.conv_hr(feat), 0.2))


# -- waifu2x cunet-style UNet ---------------------------------------------------------------------


class SEBlock(nn.Module):
    def __init__(self, c: int, r: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Linear(c, c // r)
        self.fc2 = nn.Linear(c // r, c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1).flatten(1)
        s = torch.sigmoid(self.fc2(F.relu(self.fc1(s))))
        return x * s.view(s.shape[0], s.shape[1], 1, 1)


class UNetBlock(nn.Module):
    def __init__(self, cin: int, mid: int, cout: int, se: bool) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, mid, 3)
        self.conv2 = nn.Conv2d(mid, cout, 3)
        self.se = SEBlock(cout) if se else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.leaky_relu(self.conv1(x), 0.1)
        x = F.leaky_relu(self.conv2(x), 0.1)
        return self.se(x) if self.se is not None else x


class CUNet(nn.Module):
    """waifu2x cunet's shape: valid convs, strided down, ConvTranspose2d up, crop-and-add."""

    def __init__(self) -> None:
        super().__init__()
        self.block1 = UNetBlock(3, 16, 32, se=False)
        self.down1 = nn.Conv2d(32, 32, 2, 2)
        self.block2 = UNetBlock(32, 32, 32, se=True)
        self.up1 = nn.ConvTranspose2d(32, 32, 2, 2)
        self.block3 = UNetBlock(32, 32, 32, se=False)
        self.conv_out = nn.Conv2d(32, 3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x1 = self.block1(x)
        x2 = F.leaky_relu(self.down1(x1), 0.1)
        x2 = self.block2(x2)
        x2 = F.leaky_relu(self.up1(x2), 0.1)
        x1 = x1[:, :, 4:-4, 4:-4]
        x3 = self.block3(x1 + x2)
        return self.conv_out(x3)


MODELS: dict[str, tuple[Callable[[], nn.Module], tuple[int, int, int], bool, str]] = {
    "squeezenet": (SqueezeNet11, (3, 224, 224), False, "SqueezeNet 1.1"),
    "mobilenetv2": (MobileNetV2, (3, 224, 224), False, "MobileNetV2, width 1.0"),
    "resnet18": (
        ResNet18,
        (3, 224, 224),
        False,
        "ResNet-18 with every channel width halved (32-64-128-256) to keep the "
        "repository small; same layer structure as the original",
    ),
    "shufflenetv2": (ShuffleNetV2, (3, 224, 224), False, "ShuffleNetV2 x0.5"),
    "rrdb": (
        RRDBNet,
        (3, 32, 32),
        True,
        "ESRGAN-style RRDB net: nf=16, gc=8, 20 RRDB blocks, x4 nearest upsampling",
    ),
    "cunet": (
        CUNet,
        (3, 44, 44),
        True,
        "waifu2x cunet-style UNet: valid convs, strided down, ConvTranspose2d up, "
        "crop-and-add skip, squeeze-and-excitation with Linear layers and sigmoid",
    ),
}


def export(name: str, root: Path = ROOT) -> dict[str, object]:
    import pnnx

    make, shape, fp32, description = MODELS[name]
    torch.manual_seed(SEED)
    model = make().eval()
    _randomise_bn(model, SEED)
    rng = np.random.default_rng(SEED)
    x = rng.standard_normal((1, *shape)).astype(np.float32)
    with torch.no_grad():
        y = model(torch.from_numpy(x)).numpy()[0]
    out = root / name
    if out.exists():  # a generated folder: drop stale files (a variant no longer built, etc.)
        shutil.rmtree(out)
    out.mkdir(parents=True)
    variants = [("model", True)] + ([("model_fp32", False)] if fp32 else [])
    for stem, fp16 in variants:
        with tempfile.TemporaryDirectory() as tmp:
            pt = Path(tmp) / f"{name}.pt"
            # Everything pnnx writes (.pt, _pnnx.py, .onnx, pnnx.param, ...) stays in tmp.
            pnnx.export(model, str(pt), (torch.from_numpy(x),), fp16=fp16)
            shutil.copy(Path(tmp) / f"{name}.ncnn.param", out / f"{stem}.param")
            shutil.copy(Path(tmp) / f"{name}.ncnn.bin", out / f"{stem}.bin")
    np.save(out / "input.npy", x[0])
    np.save(out / "output.npy", y.astype(np.float32))
    info = describe_param(out / "model.param")
    if info["inputs"] != ["in0"] or info["outputs"] != ["out0"]:
        raise RuntimeError(f"{name}: unexpected blob names {info['inputs']} -> {info['outputs']}")
    meta = {
        "name": name,
        "description": description,
        "input": info["inputs"][0],
        "output": info["outputs"][0],
        "input_shape": list(shape),
        "output_shape": list(y.shape),
        "ncnn_layers": info["layers"],
        "ncnn_blobs": info["blobs"],
        "layer_types": sorted(info["counts"]),
        "layer_counts": info["counts"],
        "layer_param_ids": info["param_ids"],
        "variants": [stem for stem, _ in variants],
        "files": {p.name: p.stat().st_size for p in sorted(out.iterdir()) if p.name != "meta.json"},
        "seed": SEED,
        "torch": torch.__version__,
        "pnnx": getattr(pnnx, "__version__", "unknown"),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--out", type=Path, default=ROOT)
    args = parser.parse_args(argv)
    for name in args.only or MODELS:
        meta = export(name, args.out)
        print(f"{name}: {meta['ncnn_layers']} layers, {meta['layer_counts']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
