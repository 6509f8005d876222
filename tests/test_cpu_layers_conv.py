"""The numpy Convolution family, InnerProduct and Pooling against direct nested loops."""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import pytest
from layer_checks import FakeModelBin, forward_checked

from asyncvk.layers._paramdict import ParamDict
from asyncvk.layers.convolution import Convolution, ConvolutionDepthWise
from asyncvk.layers.deconvolution import Deconvolution, DeconvolutionDepthWise
from asyncvk.layers.innerproduct import InnerProduct
from asyncvk.layers.pooling import Pooling

RNG = np.random.default_rng(7767517)
FLT_MAX = float(np.finfo(np.float32).max)
ACTIVATIONS: list[tuple[int, tuple[float, ...]]] = [
    (0, ()),
    (1, ()),
    (2, (0.1,)),
    (3, (-0.5, 0.7)),
    (4, ()),
    (5, ()),
    (6, (0.2, 0.5)),
]


def ref_act(v: float, t: int, p: tuple[float, ...]) -> float:
    """activation_ss, one scalar at a time."""
    if t == 1:
        return max(v, 0.0)
    if t == 2:
        return v if v > 0 else v * p[0]
    if t == 3:
        return min(max(v, p[0]), p[1])
    if t == 4:
        return 1.0 / (1.0 + math.exp(-v))
    if t == 5:
        return v * math.tanh(math.log(math.exp(v) + 1.0))
    if t == 6:
        lower = -p[1] / p[0]
        upper = 1.0 / p[0] + lower
        return 0.0 if v < lower else v if v > upper else v * (v * p[0] + p[1])
    return v


def make(cls: type, params: dict, data: np.ndarray | None = None):
    layer = cls()
    layer.load_param(ParamDict(params))
    if data is not None:
        mb = FakeModelBin(data)
        layer.load_model(mb)
        assert mb.offset == mb.data.size
    return layer


def run(layer, *xs: np.ndarray) -> np.ndarray:
    return forward_checked(layer, *xs)[0]


# -- Convolution ---------------------------------------------------------------------------


def ref_conv(x, wt, bias, group, sh, sw, dh, dw, pads, pad_value, act, act_p):
    """Direct convolution: pad (top, bottom, left, right), then a loop over every output."""
    top, bottom, left, right = pads
    c, h, w = x.shape
    xp = np.full((c, h + top + bottom, w + left + right), pad_value, np.float64)
    xp[:, top : top + h, left : left + w] = x
    outc, inc_g, kh, kw = wt.shape
    outh = (xp.shape[1] - (dh * (kh - 1) + 1)) // sh + 1
    outw = (xp.shape[2] - (dw * (kw - 1) + 1)) // sw + 1
    out = np.zeros((outc, outh, outw))
    outc_g = outc // group
    for p in range(outc):
        g = p // outc_g
        for i in range(outh):
            for j in range(outw):
                s = bias[p] if bias is not None else 0.0
                for q in range(inc_g):
                    for ki in range(kh):
                        for kj in range(kw):
                            v = xp[g * inc_g + q, i * sh + ki * dh, j * sw + kj * dw]
                            s += v * wt[p, q, ki, kj]
                out[p, i, j] = ref_act(s, act, act_p)
    return out


def same_pads(n: int, ext: int, s: int, upper: bool) -> tuple[int, int]:
    total = max((math.ceil(n / s) - 1) * s + ext - n, 0)
    small, big = total // 2, total - total // 2
    return (small, big) if upper else (big, small)


CONV_CASES = [
    # c, h, w, outc, group, kh, kw, sh, sw, dh, dw, pad params (4, 15, 14, 16), pad_value, bias
    (3, 5, 7, 5, 1, 3, 3, 1, 1, 1, 1, (0, 0, 0, 0), 0.0, True),
    (3, 7, 6, 4, 1, 3, 2, 2, 1, 1, 1, (1, 1, 1, 1), 0.0, False),
    (5, 7, 7, 6, 1, 3, 3, 2, 2, 2, 1, (2, 0, 1, 3), 0.5, True),
    (4, 6, 7, 7, 1, 2, 3, 1, 2, 1, 2, (-233,) * 4, 0.0, True),
    (4, 6, 7, 5, 1, 3, 3, 2, 2, 1, 1, (-233,) * 4, 0.25, True),
    (4, 6, 7, 5, 1, 4, 2, 2, 3, 1, 1, (-234,) * 4, -1.0, False),
    (3, 5, 5, 2, 1, 1, 1, 1, 1, 1, 1, (0, 0, 0, 0), 0.0, True),
]


def _conv_pads(case) -> tuple[int, int, int, int]:
    h, w, kh, kw, sh, sw, dh, dw, pp = *case[1:3], *case[5:12]
    if pp[0] in (-233, -234):
        t, b = same_pads(h, dh * (kh - 1) + 1, sh, pp[0] == -233)
        left, r = same_pads(w, dw * (kw - 1) + 1, sw, pp[0] == -233)
        return t, b, left, r
    return pp[2], pp[3], pp[0], pp[1]


def _conv_layer(cls, case, act, act_p, group_param: bool):
    c, _, _, outc, group, kh, kw, sh, sw, dh, dw, pp, pv, has_bias = case
    wt = RNG.standard_normal((outc, c // group, kh, kw)).astype(np.float32)
    bias = RNG.standard_normal(outc).astype(np.float32) if has_bias else None
    params = {0: outc, 1: kw, 11: kh, 2: dw, 12: dh, 3: sw, 13: sh, 4: pp[0], 15: pp[1]}
    params |= {14: pp[2], 16: pp[3], 18: pv, 5: int(has_bias), 6: wt.size, 9: act}
    if act_p:
        params[10] = act_p
    if group_param:
        params[7] = group
    data = wt.reshape(-1) if bias is None else np.concatenate([wt.reshape(-1), bias])
    return make(cls, params, data), wt, bias


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("act", range(7))
def test_convolution(case, act) -> None:
    act_t, act_p = ACTIVATIONS[act]
    layer, wt, bias = _conv_layer(Convolution, case, act_t, act_p, group_param=False)
    x = RNG.standard_normal(case[:3]).astype(np.float32)
    sh, sw, dh, dw, pv = case[7], case[8], case[9], case[10], case[12]
    expect = ref_conv(x, wt, bias, 1, sh, sw, dh, dw, _conv_pads(case), pv, act_t, act_p)
    np.testing.assert_allclose(run(layer, x), expect, rtol=1e-4, atol=1e-4)


DW_CASES = [
    (4, 6, 7, 4, 4, 3, 3, 1, 1, 1, 1, (1, 1, 1, 1), 0.0, True),  # depthwise
    (5, 7, 5, 5, 5, 3, 3, 2, 2, 2, 2, (2, 2, 2, 2), 0.0, False),  # depthwise, dilated
    (6, 5, 7, 9, 3, 3, 2, 1, 2, 1, 1, (1, 0, 0, 1), 0.3, True),  # groups of 2 -> 3
    (4, 7, 6, 8, 4, 2, 2, 2, 1, 1, 1, (-233,) * 4, 0.0, True),  # multiplier 2
    (6, 6, 6, 4, 2, 3, 3, 2, 2, 1, 1, (-234,) * 4, 0.0, True),
]


@pytest.mark.parametrize("case", DW_CASES)
@pytest.mark.parametrize("act", [0, 1, 3, 6])
def test_convolution_depthwise(case, act) -> None:
    act_t, act_p = ACTIVATIONS[act]
    layer, wt, bias = _conv_layer(ConvolutionDepthWise, case, act_t, act_p, group_param=True)
    x = RNG.standard_normal(case[:3]).astype(np.float32)
    group, sh, sw, dh, dw, pv = case[4], case[7], case[8], case[9], case[10], case[12]
    expect = ref_conv(x, wt, bias, group, sh, sw, dh, dw, _conv_pads(case), pv, act_t, act_p)
    np.testing.assert_allclose(run(layer, x), expect, rtol=1e-4, atol=1e-4)


def test_convolution_weight_order_by_hand() -> None:
    # one input channel, 2x2 kernel [[1, 2], [3, 4]]: out = x00 + 2 x01 + 3 x10 + 4 x11
    layer = make(Convolution, {0: 1, 1: 2, 5: 1, 6: 4}, np.array([1, 2, 3, 4, 10]))
    x = np.arange(9, dtype=np.float32).reshape(1, 3, 3)
    np.testing.assert_array_equal(run(layer, x)[0], [[37, 47], [67, 77]])


def test_convolution_1d_input_is_innerproduct() -> None:
    wt = RNG.standard_normal((3, 5)).astype(np.float32)
    layer = make(Convolution, {0: 3, 1: 1, 6: 15, 9: 1}, wt.reshape(-1))
    x = RNG.standard_normal(5).astype(np.float32)
    np.testing.assert_allclose(run(layer, x), np.maximum(wt @ x, 0), rtol=1e-5, atol=1e-6)


def test_convolution_rejects() -> None:
    with pytest.raises(ValueError, match="param 9"):
        make(Convolution, {0: 1, 1: 1, 6: 1, 9: 7})
    with pytest.raises(ValueError, match="param 10"):
        make(Convolution, {0: 1, 1: 1, 6: 1, 9: 3, 10: (1.0,)})
    with pytest.raises(ValueError, match="group"):
        make(ConvolutionDepthWise, {0: 4, 1: 1, 6: 4, 7: 3})
    layer = make(Convolution, {0: 2, 1: 3, 6: 2 * 3 * 9}, np.zeros(54))
    with pytest.raises(ValueError, match="weight_data_size"):
        layer.forward([np.zeros((4, 5, 5), np.float32)])


# -- Deconvolution -------------------------------------------------------------------------


def ref_deconv(x, wt, bias, group, sh, sw, dh, dw, opad_b, opad_r, act, act_p):
    """Scatter every input pixel times the kernel into the full output (no flip)."""
    _, h, w = x.shape
    outc, inc_g, kh, kw = wt.shape
    hf = (h - 1) * sh + dh * (kh - 1) + 1 + opad_b
    wf = (w - 1) * sw + dw * (kw - 1) + 1 + opad_r
    out = np.zeros((outc, hf, wf))
    outc_g = outc // group
    for p in range(outc):
        g = p // outc_g
        out[p] += bias[p] if bias is not None else 0.0
        for q in range(inc_g):
            for i in range(h):
                for j in range(w):
                    for ki in range(kh):
                        for kj in range(kw):
                            v = x[g * inc_g + q, i, j] * wt[p, q, ki, kj]
                            out[p, i * sh + ki * dh, j * sw + kj * dw] += v
    return np.vectorize(lambda v: ref_act(v, act, act_p))(out)


DECONV_CASES = [
    # c, h, w, outc, group, kh, kw, sh, sw, dh, dw, pads (l, r, t, b), opad (r, b), out_wh, bias
    (3, 4, 5, 5, 1, 3, 3, 1, 1, 1, 1, (0, 0, 0, 0), (0, 0), None, True),
    (3, 5, 4, 4, 1, 3, 2, 2, 2, 1, 2, (1, 1, 1, 1), (0, 0), None, False),
    (4, 3, 5, 6, 2, 4, 3, 2, 3, 1, 1, (1, 0, 2, 1), (1, 1), None, True),
    (5, 4, 4, 5, 5, 3, 3, 2, 2, 1, 1, (0, 0, 0, 0), (1, 0), None, True),
    (4, 5, 3, 4, 1, 3, 3, 2, 2, 1, 1, (-233,) * 4, (0, 0), (6, 10), True),
    (4, 5, 3, 4, 2, 3, 3, 2, 2, 1, 1, (-234,) * 4, (0, 0), (6, 9), False),
]


@pytest.mark.parametrize("case", DECONV_CASES)
@pytest.mark.parametrize("act", [0, 2, 4, 5])
def test_deconvolution(case, act) -> None:
    c, h, w, outc, group, kh, kw, sh, sw, dh, dw, pp, opad, out_wh, has_bias = case
    act_t, act_p = ACTIVATIONS[act]
    wt = RNG.standard_normal((outc, c // group, kh, kw)).astype(np.float32)
    bias = RNG.standard_normal(outc).astype(np.float32) if has_bias else None
    params = {0: outc, 1: kw, 11: kh, 2: dw, 12: dh, 3: sw, 13: sh, 4: pp[0], 15: pp[1]}
    params |= {14: pp[2], 16: pp[3], 18: opad[0], 19: opad[1], 5: int(has_bias), 6: wt.size}
    params |= {9: act_t, 10: act_p} if act_p else {9: act_t}
    if out_wh:
        params |= {20: out_wh[0], 21: out_wh[1]}
    cls = Deconvolution if group == 1 else DeconvolutionDepthWise
    if group != 1:
        params[7] = group
    data = wt.reshape(-1) if bias is None else np.concatenate([wt.reshape(-1), bias])
    layer = make(cls, params, data)
    x = RNG.standard_normal((c, h, w)).astype(np.float32)
    full = ref_deconv(x, wt, bias, group, sh, sw, dh, dw, opad[1], opad[0], act_t, act_p)
    if out_wh:
        wcut, hcut = full.shape[2] - out_wh[0], full.shape[1] - out_wh[1]
        if pp[0] == -233:
            t, left = hcut // 2, wcut // 2
        else:
            t, left = hcut - hcut // 2, wcut - wcut // 2
        expect = full[:, t : t + out_wh[1], left : left + out_wh[0]]
    else:
        expect = full[:, pp[2] : full.shape[1] - pp[3], pp[0] : full.shape[2] - pp[1]]
    np.testing.assert_allclose(run(layer, x), expect, rtol=1e-4, atol=1e-4)


def test_deconvolution_by_hand() -> None:
    # 1 -> 1 channel, x = [[1, 2]], kernel [[1, 10]], stride 2: [1, 10, 2, 20], no flip
    layer = make(Deconvolution, {0: 1, 1: 2, 11: 1, 3: 2, 6: 2}, np.array([1, 10]))
    out = run(layer, np.array([[[1, 2]]], np.float32))
    np.testing.assert_array_equal(out, [[[1, 10, 2, 20]]])


def test_deconvolution_rejects_output_size_without_same() -> None:
    with pytest.raises(ValueError, match="20/21"):
        make(Deconvolution, {0: 1, 1: 3, 6: 9, 20: 5})


# -- InnerProduct --------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(7,), (3, 2, 5), (2, 3, 2, 3), (4, 2)])
@pytest.mark.parametrize("act", [0, 1, 3])
def test_innerproduct_flatten(shape, act) -> None:
    act_t, act_p = ACTIVATIONS[act]
    n = int(np.prod(shape))
    wt = RNG.standard_normal((5, n)).astype(np.float32)
    bias = RNG.standard_normal(5).astype(np.float32)
    params = {0: 5, 1: 1, 2: wt.size, 9: act_t} | ({10: act_p} if act_p else {})
    layer = make(InnerProduct, params, np.concatenate([wt.reshape(-1), bias]))
    x = RNG.standard_normal(shape).astype(np.float32)
    flat = x.reshape(-1).astype(np.float64)
    expect = [ref_act(sum(flat[i] * wt[p, i] for i in range(n)) + bias[p], act_t, act_p)
              for p in range(5)]  # fmt: skip
    np.testing.assert_allclose(run(layer, x), expect, rtol=1e-4, atol=1e-5)


def test_innerproduct_rows() -> None:
    wt = RNG.standard_normal((3, 4)).astype(np.float32)
    layer = make(InnerProduct, {0: 3, 2: 12}, wt.reshape(-1))
    x = RNG.standard_normal((5, 4)).astype(np.float32)
    out = run(layer, x)
    assert out.shape == (5, 3)
    for r in range(5):
        for p in range(3):
            assert out[r, p] == pytest.approx(sum(x[r, i] * wt[p, i] for i in range(4)), abs=1e-5)


# -- Pooling -------------------------------------------------------------------------------


def ref_pool(x, ptype, kh, kw, sh, sw, pads, mode, include_pad):
    """Windows over the virtual padded input; pads given as (top, bottom, left, right)."""
    c, h, w = x.shape
    t, b, left, r = pads
    if mode == 0:  # full: enough tail padding that the last window starts inside
        outh = -(-(h + t + b - kh) // sh) + 1
        outw = -(-(w + left + r - kw) // sw) + 1
    else:
        outh = (h + t + b - kh) // sh + 1
        outw = (w + left + r - kw) // sw + 1
    out = np.zeros((c, outh, outw))
    for q, i, j in product(range(c), range(outh), range(outw)):
        vals, n_pad = [], 0
        for ki, kj in product(range(kh), range(kw)):
            y, xx = i * sh + ki - t, j * sw + kj - left
            if 0 <= y < h and 0 <= xx < w:
                vals.append(float(x[q, y, xx]))
            elif y < h + b and xx < w + r:
                n_pad += 1  # a real pad, not tail
        if ptype == 0:
            out[q, i, j] = max(vals)
        elif include_pad or mode in (2, 3):  # SAME modes: ncnn counts its computed pads
            out[q, i, j] = sum(vals) / (kh * kw)
        else:
            out[q, i, j] = sum(vals) / len(vals)
    return out


POOL_CASES = [
    # c, h, w, kh, kw, sh, sw, pad params (3 l, 14 r, 13 t, 15 b), mode
    (3, 5, 7, 3, 3, 2, 2, (0, 0, 0, 0), 0),
    (4, 6, 7, 3, 3, 2, 3, (1, 1, 1, 1), 0),
    (5, 7, 6, 3, 3, 2, 2, (1, 0, 2, 1), 0),
    (3, 6, 6, 2, 2, 2, 2, (0, 0, 0, 0), 0),
    (3, 7, 5, 3, 3, 2, 2, (1, 1, 1, 1), 1),
    (4, 7, 6, 2, 3, 1, 2, (0, 1, 1, 0), 1),
    (3, 6, 7, 3, 3, 2, 2, (0, 0, 0, 0), 2),
    (5, 5, 6, 2, 3, 2, 2, (0, 0, 0, 0), 2),
    (3, 6, 7, 3, 3, 2, 2, (0, 0, 0, 0), 3),
    (4, 5, 6, 4, 2, 3, 2, (0, 0, 0, 0), 3),
]


@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize(("ptype", "include_pad"), [(0, 0), (1, 0), (1, 1)])
def test_pooling(case, ptype, include_pad) -> None:
    c, h, w, kh, kw, sh, sw, pp, mode = case
    params = {0: ptype, 1: kw, 11: kh, 2: sw, 12: sh, 3: pp[0], 14: pp[1], 13: pp[2]}
    params |= {15: pp[3], 5: mode, 6: include_pad}
    layer = make(Pooling, params)
    x = RNG.standard_normal((c, h, w)).astype(np.float32)
    if mode in (2, 3):
        t, b = same_pads(h, kh, sh, mode == 2)
        left, r = same_pads(w, kw, sw, mode == 2)
    else:
        t, b, left, r = pp[2], pp[3], pp[0], pp[1]
    expect = ref_pool(x, ptype, kh, kw, sh, sw, (t, b, left, r), mode, include_pad)
    np.testing.assert_allclose(run(layer, x), expect, rtol=1e-5, atol=1e-6)


def test_pooling_full_mode_tail_by_hand() -> None:
    # w=4, k=2, s=3: full mode adds one tail column; the last window is [x3, tail]
    x = np.array([[[1, 2, 3, 4]]], np.float32)
    avg = make(Pooling, {0: 1, 1: 2, 11: 1, 2: 3, 12: 1})
    np.testing.assert_array_equal(run(avg, x), [[[1.5, 4.0]]])
    avg_inc = make(Pooling, {0: 1, 1: 2, 11: 1, 2: 3, 12: 1, 6: 1})
    np.testing.assert_array_equal(run(avg_inc, x), [[[1.5, 2.0]]])
    mx = make(Pooling, {0: 0, 1: 2, 11: 1, 2: 3, 12: 1})
    np.testing.assert_array_equal(run(mx, -x), [[[-1.0, -4.0]]])


def test_pooling_window_all_padding_as_ncnn() -> None:
    # w=7, k=2, s=3, pads 1: the last window (bordered cols 9, 10) is right pad + tail only;
    # ncnn gives -FLT_MAX for max and 0/0 for avg there rather than clipping the window
    x = np.arange(1, 8, dtype=np.float32).reshape(1, 1, 7)
    params = {1: 2, 11: 1, 2: 3, 12: 1, 3: 1, 13: 0}
    mx = run(make(Pooling, {0: 0} | params), x)
    np.testing.assert_array_equal(mx, [[[1, 4, 7, -FLT_MAX]]])
    avg = run(make(Pooling, {0: 1} | params), x)
    np.testing.assert_array_equal(avg[..., :3], [[[1, 3.5, 6.5]]])
    assert np.isnan(avg[0, 0, 3])


@pytest.mark.parametrize("ptype", [0, 1])
def test_pooling_global(ptype) -> None:
    x = RNG.standard_normal((5, 3, 7)).astype(np.float32)
    out = run(make(Pooling, {0: ptype, 4: 1}), x)
    assert out.shape == (5,)
    for q in range(5):
        vals = [float(v) for v in x[q].reshape(-1)]
        assert out[q] == pytest.approx(max(vals) if ptype == 0 else sum(vals) / 21, abs=1e-6)


@pytest.mark.parametrize("ptype", [0, 1])
@pytest.mark.parametrize(("oh", "ow"), [(3, 2), (1, 1), (4, 5), (-233, 3), (7, 6)])
def test_pooling_adaptive(ptype, oh, ow) -> None:
    c, h, w = 3, 7, 6
    x = RNG.standard_normal((c, h, w)).astype(np.float32)
    out = run(make(Pooling, {0: ptype, 7: 1, 8: ow, 18: oh}), x)
    oh = h if oh == -233 else oh
    assert out.shape == (c, oh, ow)
    for q, i, j in product(range(c), range(oh), range(ow)):
        y0, y1 = math.floor(i * h / oh), math.ceil((i + 1) * h / oh)
        x0, x1 = math.floor(j * w / ow), math.ceil((j + 1) * w / ow)
        win = x[q, y0:y1, x0:x1].astype(np.float64)
        assert out[q, i, j] == pytest.approx(win.max() if ptype == 0 else win.mean(), abs=1e-5)
