"""MultiHeadAttention and SDPA with their kv cache (param 7): one step at a time against ncnn,
and generation loops that feed each step's caches back as the next step's past, on the GPU
(lavapipe, no fallback to the CPU) and on the CPU path.

What the ncnn wheel (1.0.20261020, x86) can tell: its MultiHeadAttention keeps its caches per
head, (heads, seq, head_dim), where ncnn's reference layer and asyncvk keep (embed_dim, seq)
(``docs/developer-guide/kvcache.md``; ncnn's maintainers call cache layouts backend-specific),
so its pasts and caches are converted here and everything else is compared as is. Its SDPA
with a past gives wrong values in this build (even fed its own caches back), so SDPA's output
is compared with the wheel's SDPA without a cache on the keys and values that ``sdpa.cpp``'s
rule concatenates (past, then current, per group), and its caches with that concatenation,
bit for bit; a first step (no past) is compared with the wheel's SDPA with the cache.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import needs_vulkan
from ncnn_oracle import (
    Model,
    assert_close,
    asyncvk_forward,
    cpu_layer_types,
    ncnn_forward,
    raw,
    tagged,
    write_model,
)

from asyncvk import InputError, Net, Option
from asyncvk._errors import ModelFormatError
from asyncvk.gpu._shader_choices import ShaderChoices

ncnn = pytest.importorskip("ncnn")
pytestmark = needs_vulkan

RNG = np.random.default_rng(7)
_F32 = np.float32
#: the concat dispatch (concat.comp) and gemm.comp, where lavapipe takes copies and gemm_tiled
DISPATCH = ShaderChoices(concat_copies="never", gemm_tiled="never")


def _normal(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(_F32)


def _mask(src: int, dst: int, heads: int = 0) -> np.ndarray:
    """An additive mask with -1e9 holes, never over the last key (no row all holes)."""
    shape = (heads, src, dst) if heads else (src, dst)
    mask = _normal(*shape)
    holes = RNG.random(shape) < 0.25
    holes[..., -1] = False
    mask[holes] = -1e9
    return mask


def _write(
    tmp_path: Path, name: str, inputs: list[str], layers: list[str], weights: Sequence[bytes] = ()
) -> Model:
    lines = [f"Input {n} 0 1 {n}" for n in inputs] + layers
    blobs = len(inputs) + sum(int(line.split()[3]) for line in layers)
    return write_model(
        tmp_path, f"7767517\n{len(lines)} {blobs}\n" + "\n".join(lines), weights, name
    )


async def _asyncvk_steps(
    model: Model,
    steps: list[dict[str, np.ndarray]],
    outputs: list[str],
    feed: dict[str, str],
    gpu: bool,
    choices: ShaderChoices | None = None,
) -> tuple[list[dict[str, np.ndarray]], set[str], int]:
    """Run ``steps`` on one Net, each step's outputs ``feed[past]`` fed as its next ``past``.
    Returns every step's outputs, the types that ran on the CPU, and the plans kept at the
    end."""
    results: list[dict[str, np.ndarray]] = []
    async with Net(Option(use_vulkan_compute=gpu, shader_choices=choices)) as net:
        await net.load_param(model.param)
        await net.load_model(model.bin)
        carried: dict[str, np.ndarray] = {}
        for step in steps:
            ex = net.create_extractor()
            for name, array in {**step, **carried}.items():
                ex.input(name, array, batch_axis=False)
            results.append(await ex.extract_many(outputs))
            carried = {past: results[-1][out] for past, out in feed.items()}
        kept = sum(len(plans) for plans in net._plans.values())
        return results, cpu_layer_types(net) if gpu else set(), kept


# -- SDPA -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SdpaCase:
    """q (heads, src, dim), k (groups, cur, dim), v (groups, cur, out_dim) (2-D: one head),
    a past of ``past`` rows and a mask: "" none, "2d" (src, dst), "1" (1, src, dst), "h" one
    per head."""

    heads: int
    groups: int
    src: int
    cur: int
    dim: int
    out_dim: int
    past: int
    mask: str = ""
    params: str = ""

    @property
    def id(self) -> str:
        return (
            f"q{self.heads}x{self.src}x{self.dim}-kv{self.groups}x{self.cur}x{self.out_dim}"
            f"-past{self.past}-mask{self.mask or 'none'}{'-' + self.params if self.params else ''}"
        )

    def shape(self, heads: int, rows: int, width: int) -> tuple[int, ...]:
        return (rows, width) if self.heads == 1 and self.groups == 1 else (heads, rows, width)

    def mask_array(self, dst: int) -> np.ndarray | None:
        heads = {"": -1, "2d": 0, "1": 1, "h": self.heads}[self.mask]
        return None if heads < 0 else _mask(self.src, dst, heads)


def _sdpa_model(tmp_path: Path, case: SdpaCase, kv: bool) -> Model:
    names = ["q", "k", "v"] + (["m"] if case.mask else []) + (["pk", "pv"] if kv else [])
    tops = "out0 kout vout" if kv else "out0"
    params = f"5={int(bool(case.mask))} 7={int(kv)} {case.params}"
    layer = f"SDPA sdpa {len(names)} {len(tops.split())} {' '.join(names)} {tops} {params}"
    return _write(tmp_path, "kv" if kv else "plain", names, [layer])


def _sdpa_step(case: SdpaCase, past_k: np.ndarray, past_v: np.ndarray) -> dict[str, np.ndarray]:
    dst = case.cur + (past_k.shape[-2] if past_k.size else 0)
    step = {
        "q": _normal(*case.shape(case.heads, case.src, case.dim)),
        "k": _normal(*case.shape(case.groups, case.cur, case.dim)),
        "v": _normal(*case.shape(case.groups, case.cur, case.out_dim)),
        "pk": past_k,
        "pv": past_v,
    }
    mask = case.mask_array(dst)
    return step if mask is None else {**step, "m": mask}


def _sdpa_reference(plain: Model, step: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """sdpa.cpp's rule: the caches are past then current in each group (numpy), and the
    output is the wheel's SDPA without a cache on those keys and values."""
    caches = {}
    for name, past in (("k", step["pk"]), ("v", step["pv"])):
        cur = step[name]
        if past.size:
            groups = 1 if cur.ndim == 2 else cur.shape[0]
            rows = np.concatenate([past.reshape(groups, -1), cur.reshape(groups, -1)], axis=1)
            caches[name] = rows.reshape(groups, -1, cur.shape[-1])
        else:
            caches[name] = cur
    inputs = {n: a for n, a in step.items() if n not in ("pk", "pv")} | caches
    out = ncnn_forward(plain, inputs, ["out0"])["out0"]
    return {"out0": out, "kout": caches["k"], "vout": caches["v"]}


def _check_sdpa(ours: dict[str, np.ndarray], ref: dict[str, np.ndarray], what: str) -> None:
    assert_close(ours["out0"], ref["out0"], f"{what}: output")
    for name in ("kout", "vout"):  # copies: exact
        assert ours[name].shape == ref[name].shape, (what, name, ours[name].shape)
        np.testing.assert_array_equal(ours[name], ref[name], err_msg=f"{what}: {name}")


SDPA_CASES = [SdpaCase(3, 3, 2, 2, 5, 7, past) for past in (0, 1, 3, 6)] + [
    SdpaCase(6, 2, 3, 1, 3, 6, 4, mask="2d"),  # grouped-query, decode step
    SdpaCase(5, 1, 2, 3, 9, 3, 5, mask="1", params="6=0.3"),  # one group for five heads
    SdpaCase(3, 3, 4, 4, 5, 7, 0, mask="h"),
    SdpaCase(3, 3, 3, 2, 5, 7, 2, mask="h"),
    SdpaCase(1, 1, 3, 2, 7, 5, 3, mask="2d"),  # 2-D operands
    SdpaCase(2, 1, 37, 5, 16, 35, 36),  # past one 32x32 gemm block
]
SDPA_RUNS = [(c, None) for c in SDPA_CASES] + [(c, DISPATCH) for c in SDPA_CASES if c.past]


@pytest.mark.parametrize(
    ("case", "choices"),
    SDPA_RUNS,
    ids=[f"{c.id}-{'dispatch' if s else 'device'}" for c, s in SDPA_RUNS],
)
async def test_sdpa_cache_step_matches_ncnn(
    tmp_path: Path, case: SdpaCase, choices: ShaderChoices | None
) -> None:
    model, plain = _sdpa_model(tmp_path, case, True), _sdpa_model(tmp_path, case, False)
    past_k = _normal(*case.shape(case.groups, case.past, case.dim))
    past_v = _normal(*case.shape(case.groups, case.past, case.out_dim))
    step = _sdpa_step(case, past_k, past_v)
    ref = _sdpa_reference(plain, step)
    if not case.past:  # the wheel's own cache path holds for a first step
        theirs = ncnn_forward(model, step, ["out0"])["out0"]
        assert_close(theirs, ref["out0"], "wheel, first step")
    outputs = ["out0", "kout", "vout"]
    for gpu in (True, False):
        [ours], cpu_types, _ = await _asyncvk_steps(model, [step], outputs, {}, gpu, choices)
        assert "SDPA" not in cpu_types, "SDPA fell back to the CPU"
        _check_sdpa(ours, ref, f"gpu={gpu}")


@pytest.mark.parametrize("mask", ["", "2d"])
async def test_sdpa_generation_loop(tmp_path: Path, mask: str) -> None:
    """A prompt of 3, then ten steps of 1 (one of 2): every step's output and caches, and
    the plans one Net keeps (one shape per step) stay bounded."""
    case = SdpaCase(6, 3, 1, 1, 5, 7, 0, mask=mask)
    model, plain = _sdpa_model(tmp_path, case, True), _sdpa_model(tmp_path, case, False)
    past_k, past_v = np.zeros((3, 0, 5), _F32), np.zeros((3, 0, 7), _F32)
    steps, refs = [], []
    for cur in [3, 1, 1, 1, 2, 1, 1, 1, 1, 1, 1]:
        step_case = SdpaCase(6, 3, cur, cur, 5, 7, 0, mask=mask)
        step = _sdpa_step(step_case, past_k, past_v)
        refs.append(_sdpa_reference(plain, step))
        steps.append(step)
        past_k, past_v = refs[-1]["kout"], refs[-1]["vout"]
    # asyncvk feeds its own caches: the first step's (empty) pasts are the only ones given
    fed = [steps[0]] + [{n: a for n, a in s.items() if n not in ("pk", "pv")} for s in steps[1:]]
    for gpu in (True, False):
        results, cpu_types, kept = await _asyncvk_steps(
            model, fed, ["out0", "kout", "vout"], {"pk": "kout", "pv": "vout"}, gpu
        )
        assert "SDPA" not in cpu_types
        for t, (ours, ref) in enumerate(zip(results, refs, strict=True)):
            _check_sdpa(ours, ref, f"gpu={gpu} step {t}")
        assert kept <= 8 < len(steps), f"{kept} plans kept after {len(steps)} shapes"


# -- MultiHeadAttention -----------------------------------------------------------------------


def _mha_weights(e: int, qdim: int, kdim: int, vdim: int) -> list[bytes]:
    w = [_normal(e, qdim, scale=0.5), _normal(e, scale=0.5), _normal(e, kdim, scale=0.5)]
    w += [_normal(e, scale=0.5), _normal(e, vdim, scale=0.5), _normal(e, scale=0.5)]
    w += [_normal(qdim, e, scale=0.5), _normal(qdim, scale=0.5)]
    return [tagged(a) if i % 2 == 0 else raw(a) for i, a in enumerate(w)]


def _mha_line(
    name: str,
    bottoms: list[str],
    tops: list[str],
    e: int,
    heads: int,
    dims: tuple[int, int, int],
    mask: bool,
) -> str:
    qdim, kdim, vdim = dims
    params = f"0={e} 1={heads} 2={e * qdim} 3={kdim} 4={vdim} 5={int(mask)} 7=1"
    return (
        f"MultiHeadAttention {name} {len(bottoms)} {len(tops)} {' '.join(bottoms + tops)} {params}"
    )


def to_wheel(cache: np.ndarray, heads: int) -> np.ndarray:
    """asyncvk's (embed_dim, seq) cache as the wheel's x86 build keeps it: (heads, seq, dim)."""
    e, seq = cache.shape
    return np.ascontiguousarray(cache.reshape(heads, e // heads, seq).transpose(0, 2, 1))


def from_wheel(cache: np.ndarray) -> np.ndarray:
    heads, seq, dim = cache.shape
    return np.ascontiguousarray(cache.transpose(0, 2, 1).reshape(heads * dim, seq))


@dataclass(frozen=True)
class MhaCase:
    """One layer: 1 (self-attention), 2 or 3 q/k/v blobs, a past of ``past`` (0: a first
    step) and a mask: "" none, "2d" (src, dst), "h" (heads, src, dst)."""

    blobs: int
    embed: int
    heads: int
    src: int
    cur: int
    past: int
    dims: tuple[int, int, int]
    mask: str = ""

    @property
    def id(self) -> str:
        kind = "self" if self.blobs == 1 else f"cross{self.blobs}"
        return (
            f"{kind}-e{self.embed}h{self.heads}-{self.src}x{self.cur}-past{self.past}"
            f"-dims{','.join(map(str, self.dims))}-mask{self.mask or 'none'}"
        )


MHA_CASES = [
    MhaCase(1, 6, 3, 1, 1, 4, (5, 5, 5)),
    MhaCase(1, 6, 3, 3, 3, 0, (5, 5, 5), mask="2d"),
    MhaCase(1, 15, 5, 2, 2, 1, (7, 7, 7), mask="h"),
    MhaCase(1, 10, 2, 1, 1, 37, (9, 9, 9), mask="2d"),
    MhaCase(2, 15, 5, 2, 4, 0, (7, 5, 5)),
    MhaCase(2, 15, 5, 2, 4, 3, (7, 5, 5), mask="2d"),  # the cached keys replace k and v
    MhaCase(3, 15, 5, 3, 4, 6, (7, 5, 9), mask="h"),
    MhaCase(3, 10, 2, 3, 5, 0, (7, 5, 9), mask="2d"),
]
MHA_RUNS = [(c, None) for c in MHA_CASES] + [(c, DISPATCH) for c in MHA_CASES if c.past]


@pytest.mark.parametrize(
    ("case", "choices"),
    MHA_RUNS,
    ids=[f"{c.id}-{'dispatch' if s else 'device'}" for c, s in MHA_RUNS],
)
async def test_multiheadattention_cache_step_matches_ncnn(
    tmp_path: Path, case: MhaCase, choices: ShaderChoices | None
) -> None:
    e, h, (qdim, kdim, vdim) = case.embed, case.heads, case.dims
    names = ["q", "k", "v"][: case.blobs] + (["m"] if case.mask else []) + ["pk", "pv"]
    line = _mha_line("mha", names, ["out0", "kout", "vout"], e, h, case.dims, bool(case.mask))
    model = _write(tmp_path, "mha", names, [line], _mha_weights(e, qdim, kdim, vdim))
    dst = case.past + case.cur if case.blobs == 1 else case.past or case.cur
    step = {"q": _normal(case.src, qdim), "k": _normal(case.cur, kdim)}
    step |= {"v": _normal(case.cur, vdim), "pk": _normal(e, case.past), "pv": _normal(e, case.past)}
    if case.mask:
        step["m"] = _mask(case.src, dst, h if case.mask == "h" else 0)
    step = {n: a for n, a in step.items() if n in names}
    wheel = step | {n: to_wheel(step[n], h) for n in ("pk", "pv")}
    theirs = ncnn_forward(model, wheel, ["out0", "kout", "vout"])
    for gpu in (True, False):
        [ours], cpu_types, _ = await _asyncvk_steps(
            model, [step], ["out0", "kout", "vout"], {}, gpu, choices
        )
        assert "MultiHeadAttention" not in cpu_types, "MultiHeadAttention fell back to the CPU"
        assert_close(ours["out0"], theirs["out0"], f"gpu={gpu}: output")
        for name in ("kout", "vout"):
            assert_close(ours[name], from_wheel(theirs[name]), f"gpu={gpu}: {name}", 1e-5)


def _ncnn_loop(
    model: Model, steps: list[dict[str, np.ndarray]], feed: dict[str, str], outputs: list[str]
) -> list[dict[str, np.ndarray]]:
    """The wheel's own generation loop: each step's cache Mats fed back as they came out
    (the first step's pasts: empty Mats, as ncnn's decoders start)."""
    net = ncnn.Net()
    for option, value in (("use_vulkan_compute", False), ("use_fp16_packed", False),
                          ("use_fp16_storage", False), ("use_fp16_arithmetic", False),
                          ("use_bf16_storage", False), ("num_threads", 1)):  # fmt: skip
        setattr(net.opt, option, value)
    assert net.load_param(str(model.param)) == 0 and net.load_model(str(model.bin)) == 0
    carried: dict[str, Any] = {past: ncnn.Mat() for past in feed}
    results = []
    for step in steps:
        ex = net.create_extractor()
        for name, array in step.items():
            ex.input(name, ncnn.Mat(np.ascontiguousarray(array)).clone())
        for name, mat in carried.items():
            ex.input(name, mat)
        mats = {name: ex.extract(name)[1] for name in outputs}
        results.append({n: np.array(m, _F32, copy=True) for n, m in mats.items()})
        carried = {past: mats[out] for past, out in feed.items()}
        del mats, ex
    del carried
    net.clear()
    return results


@pytest.mark.parametrize("choices", [None, DISPATCH], ids=["device", "dispatch"])
async def test_multiheadattention_decoder_loop(
    tmp_path: Path, choices: ShaderChoices | None
) -> None:
    """A decoder block as ncnn's kv-cache guide builds one: masked self-attention whose
    cache grows, then cross-attention to an encoder's states whose keys are projected at the
    first step and cached after. A prompt of 3, then steps of 1 (one of 2), fed back; the
    output and all four caches match the wheel's own loop at every step."""
    e, h, qdim, kdim = 15, 5, 7, 9
    inputs = ["x", "enc", "m", "spk", "spv", "cpk", "cpv"]
    layers = [
        _mha_line("self", ["x", "m", "spk", "spv"], ["y", "sk", "sv"], e, h, (qdim,) * 3, True),
        _mha_line(
            "cross",
            ["y", "enc", "cpk", "cpv"],
            ["out0", "ck", "cv"],
            e,
            h,
            (qdim, kdim, kdim),
            False,
        ),
    ]
    weights = _mha_weights(e, qdim, qdim, qdim) + _mha_weights(e, qdim, kdim, kdim)
    model = _write(tmp_path, "decoder", inputs, layers, weights)
    enc = _normal(6, kdim)
    steps, past = [], 0
    for cur in [3, 1, 1, 2, 1, 1, 1, 1, 1, 1]:
        mask = _mask(cur, past + cur)
        steps.append({"x": _normal(cur, qdim), "enc": enc, "m": mask})
        past += cur
    feed = {"spk": "sk", "spv": "sv", "cpk": "ck", "cpv": "cv"}
    outputs = ["out0", "sk", "sv", "ck", "cv"]
    theirs = _ncnn_loop(model, steps, feed, outputs)
    empty = {name: np.zeros((e, 0), _F32) for name in feed}
    for gpu in (True, False):
        ours, cpu_types, kept = await _asyncvk_steps(
            model, [steps[0] | empty, *steps[1:]], outputs, feed, gpu, choices
        )
        assert "MultiHeadAttention" not in cpu_types
        for t, (a, b) in enumerate(zip(ours, theirs, strict=True)):
            assert_close(a["out0"], b["out0"], f"gpu={gpu} step {t}: output")
            for name in outputs[1:]:
                assert_close(a[name], from_wheel(b[name]), f"gpu={gpu} step {t}: {name}", 1e-5)
        assert kept <= 8 < len(steps), f"{kept} plans kept after {len(steps)} shapes"


# -- refused --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("SDPA s 5 3 q k v pk pv out0 ko vo 7=2", "SDPA: param 7 kv_cache=2 must be 0 or 1"),
        ("SDPA s 3 3 q k v out0 ko vo 7=1", "SDPA takes 5 input blobs, got 3"),
        ("SDPA s 5 1 q k v pk pv out0 7=1", "SDPA gives 3 output blobs, got 1"),
        ("MultiHeadAttention a 3 3 q pk pv out0 ko vo 0=4 2=16 7=-1", "kv_cache=-1 not 0/1"),
        ("MultiHeadAttention a 1 3 q out0 ko vo 0=4 2=16 7=1", "takes 3 to 5 input blobs, got 1"),
        ("MultiHeadAttention a 3 1 q pk pv out0 0=4 2=16 7=1", "gives 3 output blobs, got 1"),
    ],
)
async def test_bad_cache_params_refused(tmp_path: Path, line: str, message: str) -> None:
    bottoms = line.split()[4 : 4 + int(line.split()[2])]
    model = _write(tmp_path, "bad", sorted(set(bottoms)), [line])
    async with Net() as net:
        with pytest.raises(ModelFormatError, match=re.escape(message)) as caught:
            await net.load_param(model.param)
    assert "bad.param:" in str(caught.value) and f"layer '{line.split()[1]}'" in str(caught.value)


SDPA_BAD = [
    ({"pk": np.zeros((2, 3, 4), _F32)}, "past key must be (3, past_seqlen, 5)"),
    ({"pv": np.zeros((3, 2, 7), _F32)}, "past key (3, 3, 5) and value (3, 2, 7) differ"),
    ({"pv": np.zeros((3, 0, 7), _F32)}, "must both be empty (a first step, no past)"),
    ({"m": np.zeros((2, 2), _F32)}, "attn_mask must be (2, 5) or (1 or 3, 2, 5), got (2, 2)"),
]
MHA_BAD = [
    ({"pk": np.zeros((7, 3), _F32)}, "past key must be (embed_dim=6, past_seqlen)"),
    ({"pv": np.zeros((6, 4), _F32)}, "past key (6, 3) and value (6, 4) differ in length"),
    ({"m": np.zeros((1, 1), _F32)}, "attn_mask must be (1, 4) or (3, 1, 4), got (1, 1)"),
]


@pytest.mark.parametrize(
    ("kind", "change", "message"),
    [("SDPA", *c) for c in SDPA_BAD] + [("MultiHeadAttention", *c) for c in MHA_BAD],
)
async def test_bad_cache_inputs_are_errors(
    tmp_path: Path, kind: str, change: dict[str, np.ndarray], message: str
) -> None:
    if kind == "SDPA":
        case = SdpaCase(3, 3, 2, 2, 5, 7, 3, mask="2d")
        model = _sdpa_model(tmp_path, case, True)
        step = _sdpa_step(case, _normal(3, 3, 5), _normal(3, 3, 7))
    else:
        line = _mha_line("a", ["q", "m", "pk", "pv"], ["out0", "ko", "vo"], 6, 3, (5, 5, 5), True)
        model = _write(tmp_path, "mha", ["q", "m", "pk", "pv"], [line], _mha_weights(6, 5, 5, 5))
        step = {"q": _normal(1, 5), "m": _normal(1, 4), "pk": _normal(6, 3), "pv": _normal(6, 3)}
    for gpu in (True, False):
        with pytest.raises(InputError, match=re.escape(message)):
            await asyncvk_forward(model, step | change, ["out0"], gpu=gpu)


async def test_a_past_left_unset_is_an_error(tmp_path: Path) -> None:
    """A first step gives its pasts with no rows; leaving them unset (ncnn's empty blobs) is
    refused, naming them."""
    case = SdpaCase(3, 3, 2, 2, 5, 7, 0)
    step = _sdpa_step(case, np.zeros((3, 0, 5), _F32), np.zeros((3, 0, 7), _F32))
    del step["pk"], step["pv"]
    with pytest.raises(InputError, match=re.escape("input blob(s) ['pk', 'pv'] were not set")):
        await asyncvk_forward(_sdpa_model(tmp_path, case, True), step, ["out0"])
