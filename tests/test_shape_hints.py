"""Shape hints (param id 30): the ``@shapes`` shader variants, ``asyncvk shapehint``, and
``Option.use_shape_hints`` baking hinted shapes into pipelines without changing any result."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from cli_runner import cli
from pipeline_requests import build_one, request_one

from asyncvk.cache import PipelineCache, PipelineSpec
from asyncvk.cache._digest import builtin_digest
from asyncvk.gpu import VulkanDevice
from asyncvk.gpu._shader_choices import ShaderChoices
from asyncvk.net._net import Net
from asyncvk.net._option import Option
from asyncvk.net._param_parser import SHAPE_HINTS_ID, parse_param
from asyncvk.net._shape_hints import decode_hints, encode_hint, infer_shapes, write_hints
from asyncvk.shader._options import ShaderOptions
from asyncvk.shader._registry import builtin_shaders, shape_variant_source

MODELS = Path(__file__).parent / "models"
_HINT_TOKEN = re.compile(r" -23330=\S+")


def hinted_param(model: str, shape: tuple[int, ...], out: Path) -> Path:
    param = MODELS / model / "model.param"
    text = param.read_text()
    shapes = infer_shapes(parse_param(param), {"in0": shape})
    out.write_text(write_hints(text, shapes)[0])
    return out


PLAN_SHAPES: dict[str, tuple[int, ...]] = {}


async def infer(
    param: Path, model: str, x: np.ndarray, *, hints: bool, choices: ShaderChoices | None = None
) -> tuple[np.ndarray, int, int, int]:
    """Output, pipelines created, shape-baked pipelines requested, baked dispatches.

    The plan's blob shapes (by name) are left in ``PLAN_SHAPES``."""
    opt = Option(use_vulkan_compute=True, use_shape_hints=hints, shader_choices=choices)
    async with Net(opt) as net:
        await net.load_param(param)
        await net.load_model(MODELS / model / "model.bin")
        ex = net.create_extractor()
        ex.input("in0", x)
        y = await ex.extract("out0")
        (plan,) = [p for ps in net._plans.values() for p in ps]
        PLAN_SHAPES.clear()
        PLAN_SHAPES.update((net.blob_names[b], s) for b, s in plan.shapes.items())
        created = net.cache.statistics().pipelines_created
        return y, created, net.load_stats.shape_baked_pipelines, plan.baked_dispatches


# -- the shader variant ------------------------------------------------------------------------


SOURCE = """#version 450
layout(constant_id = 0) const int k = 1;
layout(push_constant) uniform Params {
    int w; int h;  // sizes
    float scale;
} p;
void main() { float v = float(p.w * p.h) * p.scale + float(k); }
"""


def test_variant_turns_push_members_into_constants_from_id_100() -> None:
    text = shape_variant_source(SOURCE)
    assert text is not None
    assert "layout(constant_id = 100) const int avk_p_w = 0;" in text
    assert "layout(constant_id = 101) const int avk_p_h = 0;" in text
    assert "layout(constant_id = 102) const float avk_p_scale = 0.0;" in text
    assert "push_constant" not in text and "p." not in text
    assert "float(avk_p_w * avk_p_h) * avk_p_scale + float(k)" in text
    assert text.count("\n") == SOURCE.count("\n")  # compiler messages keep their line numbers


@pytest.mark.parametrize(
    "block", ["{ ivec4 shape; } p;", "{ int rows; int col[9]; } p;", "{ int n; } q;"]
)
def test_non_scalar_or_unusual_push_blocks_have_no_variant(block: str) -> None:
    source = f"#version 450\nlayout(push_constant) uniform P {block}\nvoid main() {{}}\n"
    assert shape_variant_source(source) is None


def test_every_scalar_push_shader_has_a_variant_that_compiles(device: VulkanDevice) -> None:
    registry = builtin_shaders()
    with PipelineCache(device) as cache:
        variants = 0
        for name in registry.names():
            variant = registry.shape_variant(name)
            scalar = re.search(r"\bivec|\bvec|\[", _push_block(registry.get(name).source)) is None
            assert (variant is not None) == scalar, name
            if variant is None:
                continue
            variants += 1
            assert registry.get(variant).source_hash != registry.get(name).source_hash
            _, info = cache.spirv.builtin(variant, ShaderOptions())
            assert info.push_constant_size == 0, variant
            assert any(i >= 100 for i in info.user_specialization_ids), variant
            assert cache.spirv_key(variant, ShaderOptions()) != cache.spirv_key(
                name, ShaderOptions()
            )
        assert variants >= 10
        assert "binary" in registry.names() and registry.shape_variant("binary") is None


def _push_block(source: str) -> str:
    match = re.search(r"push_constant[^{]*\{([^}]*)\}", source)
    assert match is not None
    return match.group(1)


def test_cache_file_keeps_variant_spirv(device: VulkanDevice) -> None:
    with PipelineCache(device) as cache:
        cache.spirv.builtin("unary@shapes", ShaderOptions())
        data = cache.save_cache()
    with PipelineCache(device) as again:
        result = again.load_cache(data)
        assert result and result.entries_skipped == 0
        assert any(k.shader == "unary@shapes" for k in again.spirv_entries())


def test_digest_separates_baked_values() -> None:
    args = ("convolution@shapes", 0, (8, 8, 1), 0, (1, 2))
    plain = builtin_digest(*args)
    one = builtin_digest(*args, b"\x01\x00\x00\x00")
    two = builtin_digest(*args, b"\x02\x00\x00\x00")
    assert len({plain, one, two}) == 3
    assert one == builtin_digest(*args, b"\x01\x00\x00\x00")


def test_baked_pipeline_takes_push_bytes_as_constants(device: VulkanDevice) -> None:
    push = np.array([5], np.int32).tobytes()
    with PipelineCache(device) as cache:
        specs = dict(specializations=(0, 0.0, 0.0), local_size=(64, 1, 1))
        a = build_one(cache, PipelineSpec("unary", **specs))  # type: ignore[arg-type]
        b = request_one(cache, PipelineSpec("unary@shapes", baked_push=push, **specs)).result()  # type: ignore[arg-type]
        c = request_one(cache, PipelineSpec("unary@shapes", baked_push=push, **specs)).result()  # type: ignore[arg-type]
        assert a.push_constant_size == 4 and b.push_constant_size == 0
        assert b is c and cache.statistics().pipelines_created == 2


# -- the hint array and the shapehint command ---------------------------------------------------


def test_hint_encoding_round_trips() -> None:
    shapes = [(7,), (3, 5), (4, 6, 8)]
    flat = tuple(v for s in shapes for v in encode_hint(s))
    assert flat[:4] == (1, 7, 0, 0) and flat[8:] == (3, 8, 6, 4)
    assert decode_hints(flat, 3) == shapes
    assert decode_hints(flat, 2) == [None, None]  # wrong length: no hints at all
    assert decode_hints((4, 1, 1, 1), 1) == [None]


def test_shapehint_writes_hints_that_parse_back_and_match_inference(tmp_path: Path) -> None:
    src = MODELS / "cunet" / "model.param"
    out = tmp_path / "hinted.param"
    proc = cli("shapehint", str(src), "--shape", "in0=3,44,44", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    param = parse_param(out)
    assert report["layers_hinted"] == len(param.layers)
    # every line as it was, plus one id-30 array
    original = src.read_text().split("\n")
    written = out.read_text().split("\n")
    assert [_HINT_TOKEN.sub("", line) for line in written] == original
    shapes = infer_shapes(parse_param(src), {"in0": (3, 44, 44)})
    assert shapes["out0"] == (3, 26, 26)
    for decl in param.layers:
        hints = decode_hints(decl.params[SHAPE_HINTS_ID], len(decl.tops))
        assert hints == [shapes[t] for t in decl.tops], decl.name
    # hinting a hinted file replaces the hints
    again = tmp_path / "again.param"
    proc = cli("shapehint", str(out), "--shape", "in0=3,52,52", "-o", str(again))
    assert proc.returncode == 0, proc.stderr
    lines = again.read_text().split("\n")
    assert all(line.count("-23330=") <= 1 for line in lines)
    assert [_HINT_TOKEN.sub("", line) for line in lines] == original
    assert "-23330=4,3,52,52,3" in lines[2]


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ("in0=3,x,44", "expected NAME=C,H,W"),
        ("nope=3,44,44", "no input named 'nope' (inputs: in0)"),
        ("in0=1,2,3,44,44", "1 to 3 positive dims"),
    ],
)
def test_shapehint_errors_are_one_line(tmp_path: Path, shape: str, message: str) -> None:
    src = MODELS / "cunet" / "model.param"
    proc = cli("shapehint", str(src), "--shape", shape, "-o", str(tmp_path / "o.param"))
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "o.param").exists()


# -- Option.use_shape_hints ----------------------------------------------------------------------


@pytest.mark.parametrize("model", ["squeezenet", "shufflenetv2"])
async def test_hinted_pipelines_give_the_same_outputs(
    device: VulkanDevice, tmp_path: Path, model: str
) -> None:
    x = np.load(MODELS / model / "input.npy")
    param = hinted_param(model, tuple(x.shape[-3:]), tmp_path / "h.param")
    y0, created0, _, _ = await infer(MODELS / model / "model.param", model, x, hints=False)
    y1, created1, baked, dispatches = await infer(param, model, x, hints=True)
    np.testing.assert_allclose(y1, y0, rtol=1e-4, atol=1e-5)
    assert created1 > created0 and baked > 0 and dispatches > 0
    # the hints are the shapes the GPU plan inferred for every blob
    for decl in parse_param(param).layers:
        hints = decode_hints(decl.params[SHAPE_HINTS_ID], len(decl.tops))
        assert hints == [PLAN_SHAPES[t] for t in decl.tops], decl.name
    ref = np.load(MODELS / model / "output.npy")
    assert np.linalg.norm(y1 - ref) / np.linalg.norm(ref) < 2e-3


async def test_split_k_layers_dispatch_their_baked_pipelines(
    device: VulkanDevice, tmp_path: Path
) -> None:
    """The dry record that picks what to bake takes the pipelines a load builds (split-K's,
    not the background ones): every baked pipeline is one the plan then dispatches."""
    choices = ShaderChoices(conv_splitk="always", conv_tiled="never")
    model = "squeezenet"
    x = np.load(MODELS / model / "input.npy")
    param = hinted_param(model, tuple(x.shape[-3:]), tmp_path / "h.param")
    y, _, baked, dispatches = await infer(param, model, x, hints=True, choices=choices)
    assert baked > 0 and dispatches >= baked
    ref = np.load(MODELS / model / "output.npy")
    assert np.linalg.norm(y - ref) / np.linalg.norm(ref) < 2e-3


async def test_other_input_sizes_fall_back_to_generic_pipelines(
    device: VulkanDevice, tmp_path: Path
) -> None:
    model = "squeezenet"
    param = hinted_param(model, (3, 224, 224), tmp_path / "h.param")
    x = np.random.default_rng(7767517).standard_normal((3, 96, 112)).astype(np.float32)
    y0, _, _, _ = await infer(MODELS / model / "model.param", model, x, hints=False)
    y1, _, baked, dispatches = await infer(param, model, x, hints=True)
    np.testing.assert_allclose(y1, y0, rtol=1e-4, atol=1e-5)
    assert baked > 0 and dispatches == 0


async def test_wrong_hints_still_give_the_right_result(
    device: VulkanDevice, tmp_path: Path
) -> None:
    model = "shufflenetv2"
    x = np.load(MODELS / model / "input.npy")
    wrong = hinted_param(model, (3, 64, 48), tmp_path / "wrong.param")
    y0, _, _, _ = await infer(MODELS / model / "model.param", model, x, hints=False)
    y1, _, baked, _ = await infer(wrong, model, x, hints=True)
    assert baked > 0
    np.testing.assert_allclose(y1, y0, rtol=1e-4, atol=1e-5)


async def test_hints_are_ignored_without_the_option(device: VulkanDevice, tmp_path: Path) -> None:
    model = "squeezenet"
    x = np.load(MODELS / model / "input.npy")
    param = hinted_param(model, tuple(x.shape[-3:]), tmp_path / "h.param")
    y0, created0, _, _ = await infer(MODELS / model / "model.param", model, x, hints=False)
    y1, created1, baked, dispatches = await infer(param, model, x, hints=False)
    np.testing.assert_array_equal(y1, y0)
    assert (created1, baked, dispatches) == (created0, 0, 0)


def test_bench_with_shape_hints_reports_baked_pipelines(tmp_path: Path) -> None:
    m = MODELS / "cunet"
    hinted = hinted_param("cunet", (3, 44, 44), tmp_path / "h.param")
    reports = []
    for flags in ([], ["--shape-hints"]):
        proc = cli(
            "bench", str(hinted), str(m / "model.bin"), "--shape", "in0=3,44,44", "--loops", "1",
            "--json", *flags,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        reports.append(json.loads(proc.stdout))
    plain, baked = reports
    assert plain["shape_baked_pipelines"] == 0 < baked["shape_baked_pipelines"]
    assert baked["pipelines_created"] > plain["pipelines_created"]


def test_shapehint_never_writes_over_its_input_unless_asked(tmp_path: Path) -> None:
    src = tmp_path / "model.param"
    src.write_bytes((MODELS / "cunet" / "model.param").read_bytes())
    before = src.read_bytes()
    for target in (str(src), str(tmp_path / "." / "model.param")):
        proc = cli("shapehint", str(src), "--shape", "in0=3,44,44", "-o", target)
        assert proc.returncode == 1 and "is the input itself" in proc.stderr, proc.stderr
        assert src.read_bytes() == before
    proc = cli("shapehint", str(src), "--shape", "in0=3,44,44", "--in-place")
    assert proc.returncode == 0, proc.stderr
    assert src.read_bytes() != before and "-23330=" in src.read_text()


def test_shapehint_that_cannot_hint_every_layer_says_which_and_why(tmp_path: Path) -> None:
    src = MODELS / "cunet" / "model.param"
    out = tmp_path / "o.param"
    proc = cli("shapehint", str(src), "--shape", "in0=4,44,44", "-o", str(out))
    assert proc.returncode == 1, proc.stderr
    assert "1 of 19 layers" in proc.stderr and "'convrelu_0'" in proc.stderr, proc.stderr
    assert "expects 3 input channels, got 4" in proc.stderr and not out.exists()
    proc = cli("shapehint", str(src), "--shape", "in0=4,44,44", "-o", str(out), "--allow-partial")
    assert proc.returncode == 0 and "on 1 of 19 layers" in proc.stdout, proc.stderr
