"""Data-movement layers and Interp against loops and hand values written from ncnn's C++."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from layer_checks import forward_checked

import asyncvk.layers.borders
import asyncvk.layers.data_movement
import asyncvk.layers.resample
import asyncvk.layers.reshape  # noqa: F401  (registers the shape layers)
from asyncvk.layers import Layer, layer_class
from asyncvk.layers._paramdict import ParamDict

RNG = np.random.default_rng(7767517)


def make(type_name: str, tops: int = 1, **params: object) -> Layer:
    cls = layer_class(type_name)
    assert cls is not None
    layer = cls()
    layer.tops = [f"t{i}" for i in range(tops)]
    layer.load_param(ParamDict({int(k[1:]): v for k, v in params.items()}))  # type: ignore[arg-type]
    return layer


def run(layer: Layer, *inputs: np.ndarray) -> list[np.ndarray]:
    return forward_checked(layer, *inputs)


def rand(*shape: int) -> np.ndarray:
    return RNG.uniform(-2.0, 2.0, size=shape).astype(np.float32)


class FakeModelBin:
    def __init__(self, data: list[float]) -> None:
        self.data = np.asarray(data, dtype=np.float32)

    def load(self, w: int, type: int) -> np.ndarray:
        assert type == 1 and w == self.data.size
        return self.data


SHAPES = {1: (6,), 2: (4, 6), 3: (3, 4, 6), 4: (2, 3, 4, 6)}


# ---------------------------------------------------------------- Split, Concat, Slice


def test_split_and_flatten() -> None:
    x = rand(2, 3, 4)
    outs = run(make("Split", tops=3), x)
    assert len(outs) == 3
    for o in outs:
        np.testing.assert_array_equal(o, x)
    (flat,) = run(make("Flatten"), x)
    assert flat.shape == (24,)
    for q, y, i in itertools.product(range(2), range(3), range(4)):
        assert flat[q * 12 + y * 4 + i] == x[q, y, i]


@pytest.mark.parametrize(("dims", "axis"), [(d, a) for d in (1, 2, 3, 4) for a in range(-d, d)])
def test_concat(dims: int, axis: int) -> None:
    pos = axis % dims
    parts = []
    for n in (1, 2, 3):
        s = list(SHAPES[dims])
        s[pos] = n
        parts.append(rand(*s))
    (out,) = run(make("Concat", p0=axis), *parts)
    assert out.shape[pos] == 6
    offset = 0
    for p in parts:
        for idx in np.ndindex(*p.shape):
            j = list(idx)
            j[pos] += offset
            assert out[tuple(j)] == p[idx]
        offset += p.shape[pos]


@pytest.mark.parametrize(("dims", "axis"), [(d, a) for d in (1, 2, 3, 4) for a in range(-d, d)])
def test_slice(dims: int, axis: int) -> None:
    x = rand(*(max(n, 4) for n in SHAPES[dims]))
    pos = axis % dims
    n = x.shape[pos]
    # slices with -233: a fixed first part, the rest shared evenly
    outs = run(make("Slice", tops=3, p0=(1, -233, -233), p1=axis), x)
    first = 1
    second = (n - 1) // 2
    want_sizes = [first, second, n - first - second]
    assert [o.shape[pos] for o in outs] == want_sizes
    starts = [0, first, first + second]
    for o, s0 in zip(outs, starts, strict=True):
        for idx in np.ndindex(*o.shape):
            j = list(idx)
            j[pos] += s0
            assert o[idx] == x[tuple(j)]
    # indices form, one negative
    outs = run(make("Slice", tops=3, p2=(1, -2), p1=axis), x)
    assert [o.shape[pos] for o in outs] == [1, n - 3, 2]
    np.testing.assert_array_equal(np.concatenate(outs, axis=pos), x)


def test_slice_hand_values() -> None:
    x = np.arange(7, dtype=np.float32)
    a, b, c = run(make("Slice", tops=3, p0=(-233, -233, -233)), x)
    assert a.tolist() == [0, 1] and b.tolist() == [2, 3] and c.tolist() == [4, 5, 6]


# ---------------------------------------------------------------- Crop


def test_crop_offsets_and_sizes() -> None:
    x = rand(3, 5, 6)
    (out,) = run(make("Crop", p0=1, p1=2, p2=1, p3=3, p4=2, p5=-233), x)
    np.testing.assert_array_equal(out, x[1:3, 2:4, 1:4])
    # out sizes larger than what is left are clamped to what is left
    (out,) = run(make("Crop", p0=4, p1=0, p2=0, p3=5, p4=-233, p5=-233), x)
    np.testing.assert_array_equal(out, x[:, :, 4:6])
    x4 = rand(2, 4, 5, 6)
    (out,) = run(make("Crop", p0=1, p1=1, p13=2, p2=1, p3=2, p4=3, p14=1, p5=1), x4)
    np.testing.assert_array_equal(out, x4[1:2, 2:3, 1:4, 1:3])
    x1 = rand(8)
    (out,) = run(make("Crop", p0=2, p3=4), x1)
    np.testing.assert_array_equal(out, x1[2:6])
    x2 = rand(5, 6)
    (out,) = run(make("Crop", p0=1, p1=2, p3=-233, p4=2), x2)
    np.testing.assert_array_equal(out, x2[2:4, 1:])


def test_crop_second_offsets() -> None:
    x = rand(4, 5, 6)
    layer = make("Crop", p0=1, p1=1, p2=1, p6=2, p7=1, p8=1, p3=-233, p4=-233, p5=-233)
    (out,) = run(layer, x)
    np.testing.assert_array_equal(out, x[1:3, 1:4, 1:4])
    x4 = rand(2, 4, 5, 6)
    layer = make("Crop", p13=1, p15=2, p0=0, p6=1, p3=-233, p4=-233, p14=-233, p5=-233)
    (out,) = run(layer, x4)
    np.testing.assert_array_equal(out, x4[:, 1:2, :, 0:5])


def test_crop_numpy_style() -> None:
    x = rand(4, 5, 6)
    (out,) = run(make("Crop", p9=(1, -3), p10=(-1, 0), p11=(0, 2)), x)
    np.testing.assert_array_equal(out, x[1:3, :, 3:])  # end 0 means "to the end" in ncnn
    (out,) = run(make("Crop", p9=(-233, 1, 2), p10=(2, -233, 100)), x)
    np.testing.assert_array_equal(out, x[0:2, 1:, 2:])
    (out,) = run(make("Crop", p9=(1,), p10=(3,), p11=(-2,)), x)
    np.testing.assert_array_equal(out, x[:, 1:3, :])
    x4 = rand(2, 4, 5, 6)
    (out,) = run(make("Crop", p9=(1, 2), p10=(3, 4), p11=(1, 3)), x4)
    np.testing.assert_array_equal(out, x4[:, 1:3, :, 2:4])
    x1 = rand(7)
    (out,) = run(make("Crop", p9=(2,), p10=(-2,), p11=(0,)), x1)
    np.testing.assert_array_equal(out, x1[2:5])


def test_crop_reference_blob() -> None:
    x = rand(3, 5, 6)
    (out,) = run(make("Crop", p0=1, p1=1, p2=1), x, np.zeros((2, 3, 4), np.float32))
    np.testing.assert_array_equal(out, x[1:3, 1:4, 1:5])
    # a 2-D reference keeps every channel
    (out,) = run(make("Crop", p0=2, p1=1), x, np.zeros((3, 4), np.float32))
    np.testing.assert_array_equal(out, x[:, 1:4, 2:6])
    # woffset -233: offsets and sizes packed as ints in the reference blob's data
    box = np.array([1, 1, 0, 3, 2, 2], dtype=np.int32).view(np.float32)
    (out,) = make("Crop", p0=-233).forward([x, box])
    np.testing.assert_array_equal(out, x[0:2, 1:3, 1:4])


# ---------------------------------------------------------------- Padding


def reflect(i: int, n: int) -> int:
    i = abs(i)
    return (n - 1) - abs(i - (n - 1))


def loop_pad(
    x: np.ndarray, pads: list[tuple[int, int]], ptype: int, values: list[float]
) -> np.ndarray:
    """Index-mapping loop; ``values`` is the constant for each index of axis 0."""
    out_shape = tuple(n + a + b for n, (a, b) in zip(x.shape, pads, strict=True))
    out = np.zeros(out_shape, dtype=np.float32)
    for idx in np.ndindex(*out_shape):
        src = []
        inside = True
        for i, n, (a, _) in zip(idx, x.shape, pads, strict=True):
            j = i - a
            if ptype == 1:
                j = min(max(j, 0), n - 1)
            elif ptype == 2:
                j = reflect(j, n)
            inside &= 0 <= j < n
            src.append(j)
        out[idx] = x[tuple(src)] if inside else values[idx[0] if len(values) > 1 else 0]
    return out


@pytest.mark.parametrize("ptype", [0, 1, 2])
def test_padding(ptype: int) -> None:
    x3 = rand(3, 4, 5)
    layer = make("Padding", p0=1, p1=2, p2=2, p3=1, p7=1, p8=2, p4=ptype, p5=-1.5)
    (out,) = run(layer, x3)
    want = loop_pad(x3, [(1, 2), (1, 2), (2, 1)], ptype, [-1.5])
    np.testing.assert_array_equal(out, want)
    x4 = rand(2, 3, 4, 5)
    layer = make("Padding", p0=1, p1=0, p2=0, p3=2, p7=2, p8=1, p4=ptype, p5=0.5)
    (out,) = run(layer, x4)
    np.testing.assert_array_equal(out, loop_pad(x4, [(0, 0), (2, 1), (1, 0), (0, 2)], ptype, [0.5]))
    x2 = rand(4, 5)
    (out,) = run(make("Padding", p0=2, p1=1, p2=1, p3=3, p4=ptype, p5=2.0), x2)
    np.testing.assert_array_equal(out, loop_pad(x2, [(2, 1), (1, 3)], ptype, [2.0]))
    x1 = rand(5)
    (out,) = run(make("Padding", p2=3, p3=1, p0=7, p4=ptype, p5=2.0), x1)
    np.testing.assert_array_equal(out, loop_pad(x1, [(3, 1)], ptype, [2.0]))


def test_padding_per_channel() -> None:
    x = rand(2, 3, 3)
    layer = make("Padding", p0=1, p2=1, p7=1, p8=1, p6=4)
    layer.load_model(FakeModelBin([10.0, 20.0, 30.0, 40.0]))
    (out,) = run(layer, x)
    want = loop_pad(x, [(1, 1), (1, 0), (1, 0)], 0, [10.0, 20.0, 30.0, 40.0])
    np.testing.assert_array_equal(out, want)
    x4 = rand(2, 2, 3, 3)
    layer = make("Padding", p1=1, p8=1, p6=2)
    layer.load_model(FakeModelBin([7.0, 8.0]))
    (out,) = run(layer, x4)
    np.testing.assert_array_equal(out, loop_pad(x4, [(0, 0), (0, 1), (0, 1), (0, 0)], 0, [7, 8]))


# ---------------------------------------------------------------- Reshape


@pytest.mark.parametrize(
    ("params", "in_shape", "out_shape"),
    [
        ({"p0": -1}, (2, 3, 4), (24,)),
        ({"p0": 4, "p1": -1}, (2, 3, 4), (6, 4)),
        ({"p0": 0, "p1": -1}, (2, 3, 4), (6, 4)),
        ({"p0": 0, "p1": 0, "p2": -1}, (2, 3, 4), (2, 3, 4)),
        ({"p0": 2, "p1": 6, "p2": 0}, (2, 3, 4), (2, 6, 2)),
        ({"p0": 2, "p1": -1, "p11": 3, "p2": 2}, (2, 3, 4), (2, 3, 2, 2)),
        ({"p0": 6, "p1": 4, "p2": -233}, (2, 3, 4), (4, 6)),
        ({"p0": 24}, (4, 6), (24,)),
        ({"p0": 6, "p1": 4, "p11": -233, "p2": 1}, (2, 3, 4), (1, 4, 6)),
        ({"p0": -1, "p1": 2, "p2": 3}, (24,), (3, 2, 4)),
        ({"p0": 0, "p1": 0, "p11": -1, "p2": 0}, (2, 6, 4, 5), (2, 6, 4, 5)),
    ],
)
def test_reshape(params: dict, in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> None:
    x = rand(*in_shape)
    (out,) = run(make("Reshape", **params), x)
    assert out.shape == out_shape
    assert out.ravel().tolist() == x.ravel().tolist()


# ---------------------------------------------------------------- Permute


def test_permute_2d() -> None:
    x = rand(3, 5)
    (out,) = run(make("Permute", p0=0), x)
    np.testing.assert_array_equal(out, x)
    (out,) = run(make("Permute", p0=1), x)
    assert out.shape == (5, 3)
    for i, j in itertools.product(range(5), range(3)):
        assert out[i, j] == x[j, i]


PERMUTE_3D = {  # out shape (numpy) and out[q, i, j] -> x index, from permute.cpp's loops
    0: (lambda c, h, w: (c, h, w), lambda q, i, j: (q, i, j)),
    1: (lambda c, h, w: (c, w, h), lambda q, i, j: (q, j, i)),
    2: (lambda c, h, w: (h, c, w), lambda q, i, j: (i, q, j)),
    3: (lambda c, h, w: (h, w, c), lambda q, i, j: (j, q, i)),
    4: (lambda c, h, w: (w, c, h), lambda q, i, j: (i, j, q)),
    5: (lambda c, h, w: (w, h, c), lambda q, i, j: (j, i, q)),
}


@pytest.mark.parametrize("order", range(6))
def test_permute_3d(order: int) -> None:
    x = rand(2, 3, 4)
    shape_fn, src = PERMUTE_3D[order]
    (out,) = run(make("Permute", p0=order), x)
    assert out.shape == shape_fn(2, 3, 4)
    for idx in np.ndindex(*out.shape):
        assert out[idx] == x[src(*idx)]


def test_permute_4d_samples() -> None:
    x = rand(2, 3, 4, 5)  # c d h w
    (out,) = run(make("Permute", p0=9), x)  # "c w h d": create(c, w, h, d)
    assert out.shape == (3, 4, 5, 2)
    for q, z, i, j in np.ndindex(*out.shape):
        assert out[q, z, i, j] == x[j, q, z, i]
    (out,) = run(make("Permute", p0=13), x)  # "d w c h": create(d, w, c, h)
    assert out.shape == (4, 2, 5, 3)
    for q, z, i, j in np.ndindex(*out.shape):
        assert out[q, z, i, j] == x[z, j, q, i]
    (out,) = run(make("Permute", p0=23), x)  # "c d h w": full reverse
    np.testing.assert_array_equal(out, x.transpose(3, 2, 1, 0))
    with pytest.raises(ValueError):
        make("Permute", p0=6).forward([rand(2, 3, 4)])


# ---------------------------------------------------------------- ShuffleChannel, PixelShuffle


@pytest.mark.parametrize(("group", "reverse"), [(2, 0), (3, 0), (2, 1), (3, 1)])
def test_shufflechannel(group: int, reverse: int) -> None:
    x = rand(6, 2, 3)
    (out,) = run(make("ShuffleChannel", p0=group, p1=reverse), x)
    g = 6 // group if reverse else group
    cpg = 6 // g
    for i, j in itertools.product(range(g), range(cpg)):
        np.testing.assert_array_equal(out[g * j + i], x[cpg * i + j])
    (back,) = run(make("ShuffleChannel", p0=group, p1=1 - reverse), out)
    np.testing.assert_array_equal(back, x)


@pytest.mark.parametrize("mode", [0, 1])
def test_pixelshuffle(mode: int) -> None:
    r, outc, h, w = 2, 3, 2, 3
    x = rand(outc * r * r, h, w)
    (out,) = run(make("PixelShuffle", p0=r, p1=mode), x)
    assert out.shape == (outc, h * r, w * r)
    for p, sh, sw, i, j in itertools.product(range(outc), range(r), range(r), range(h), range(w)):
        q = p * r * r + sh * r + sw if mode == 0 else (sh * r + sw) * outc + p
        assert out[p, i * r + sh, j * r + sw] == x[q, i, j]


# ---------------------------------------------------------------- Interp


def test_interp_nearest_hand_values() -> None:
    x = np.array([[[1, 2], [3, 4]]], dtype=np.float32)
    (out,) = run(make("Interp", p0=1, p1=2.0, p2=2.0), x)
    want = [[1, 1, 2, 2], [1, 1, 2, 2], [3, 3, 4, 4], [3, 3, 4, 4]]
    np.testing.assert_array_equal(out[0], want)
    # explicit sizes: ws = 2/3 -> source columns 0, 0, 1
    (out,) = run(make("Interp", p0=1, p3=3, p4=3), x)
    np.testing.assert_array_equal(out[0], [[1, 1, 2], [1, 1, 2], [3, 3, 4]])
    # downscale by 0.5: ws = 2 -> columns 0, 2
    x4 = np.arange(16, dtype=np.float32).reshape(1, 4, 4)
    (out,) = run(make("Interp", p0=1, p1=0.5, p2=0.5), x4)
    np.testing.assert_array_equal(out[0], [[0, 2], [8, 10]])
    # dynamic target size: ws falls back to 1/width_scale = 1, clamped to the last column
    (out,) = run(make("Interp", p0=1, p5=1), x, np.zeros((1, 3, 4), np.float32))
    np.testing.assert_array_equal(out[0], [[1, 2, 2, 2], [3, 4, 4, 4], [3, 4, 4, 4]])


def test_interp_bilinear_hand_values() -> None:
    x = np.array([[0.0, 1.0]], dtype=np.float32)  # 2-D: only w is resized
    (out,) = run(make("Interp", p0=2, p2=2.0), x)
    np.testing.assert_allclose(out, [[0.0, 0.25, 0.75, 1.0]], rtol=1e-6)
    (out,) = run(make("Interp", p0=2, p2=2.0, p6=1), x)
    np.testing.assert_allclose(out, [[0.0, 1 / 3, 2 / 3, 1.0]], rtol=1e-6)
    x3 = np.array([[[0.0, 1.0], [2.0, 3.0]]], dtype=np.float32)
    (out,) = run(make("Interp", p0=2, p3=3, p4=3, p6=1), x3)
    np.testing.assert_allclose(out[0], [[0, 0.5, 1], [1, 1.5, 2], [2, 2.5, 3]], rtol=1e-6)


def loop_linear_coeffs(w: int, outw: int, align: int) -> list[tuple[int, float, float]]:
    scale = (w - 1) / (outw - 1) if align else w / outw
    table = []
    for dx in range(outw):
        fx = float(np.float32(dx * scale if align else (dx + 0.5) * scale - 0.5))
        sx = math.floor(fx)
        fx = float(np.float32(fx - sx))
        if sx < 0:
            sx, fx = 0, 0.0
        if sx >= w - 1:
            sx, fx = w - 2, 1.0
        table.append((sx, 1.0 - fx, fx))
    return table


def loop_cubic_coeffs(w: int, outw: int, align: int) -> list[tuple[int, list[float]]]:
    scale = (w - 1) / (outw - 1) if align else w / outw
    table = []
    a = -0.75
    for dx in range(outw):
        fx = float(np.float32(dx * scale if align else (dx + 0.5) * scale - 0.5))
        sx = math.floor(fx)
        fx = float(np.float32(fx - sx))
        f0, f1, f2 = fx + 1, fx, 1 - fx
        c = [
            a * f0**3 - 5 * a * f0**2 + 8 * a * f0 - 4 * a,
            (a + 2) * f1**3 - (a + 3) * f1**2 + 1,
            (a + 2) * f2**3 - (a + 3) * f2**2 + 1,
        ]
        c.append(1 - c[0] - c[1] - c[2])
        if sx <= -1:
            sx, c = 1, [1 - c[3], c[3], 0.0, 0.0]
        if sx == 0:
            sx, c = 1, [c[0] + c[1], c[2], c[3], 0.0]
        if sx == w - 2:
            sx, c = w - 3, [0.0, c[0], c[1], c[2] + c[3]]
        if sx >= w - 1:
            sx, c = w - 3, [0.0, 0.0, c[0], 1 - c[0]]
        table.append((sx, c))
    return table


def loop_resize(x: np.ndarray, outh: int, outw: int, kind: int, align: int) -> np.ndarray:
    c, h, w = x.shape
    out = np.zeros((c, outh, outw))
    if kind == 2:
        xt = [(sx, [a0, a1]) for sx, a0, a1 in loop_linear_coeffs(w, outw, align)]
        yt = [(sy, [b0, b1]) for sy, b0, b1 in loop_linear_coeffs(h, outh, align)]
        first = 0
    else:
        xt, yt = loop_cubic_coeffs(w, outw, align), loop_cubic_coeffs(h, outh, align)
        first = -1
    for q, dy, dx in itertools.product(range(c), range(outh), range(outw)):
        sy, beta = yt[dy]
        sx, alpha = xt[dx]
        total = 0.0
        for ty, b in enumerate(beta):
            row = sum(
                float(x[q, sy + first + ty, sx + first + tx]) * al for tx, al in enumerate(alpha)
            )
            total += row * b
        out[q, dy, dx] = total
    return out


@pytest.mark.parametrize("kind", [2, 3])
@pytest.mark.parametrize("align", [0, 1])
@pytest.mark.parametrize(("outh", "outw"), [(9, 11), (3, 4), (6, 5)])
def test_interp_against_loops(kind: int, align: int, outh: int, outw: int) -> None:
    x = rand(2, 5, 6)
    (out,) = run(make("Interp", p0=kind, p3=outh, p4=outw, p6=align), x)
    np.testing.assert_allclose(out, loop_resize(x, outh, outw, kind, align), rtol=1e-5, atol=1e-5)


def test_interp_2d_bicubic_and_1d() -> None:
    x = rand(3, 6)
    (out,) = run(make("Interp", p0=3, p2=1.5), x)
    assert out.shape == (3, 9)
    # 2-D input resizes only w, with the same cubic table
    want = np.zeros((3, 9))
    for y, (dx, (sx, c)) in itertools.product(range(3), enumerate(loop_cubic_coeffs(6, 9, 0))):
        want[y, dx] = sum(float(x[y, sx - 1 + t]) * c[t] for t in range(4))
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    v = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    (out,) = run(make("Interp", p0=2, p3=2, p4=4), v)
    assert out.shape == (3, 2, 4)
    np.testing.assert_array_equal(out[2], np.full((2, 4), 3.0))
