"""A cache file whose checksums all hold but whose content is wrong costs time, never a run or a
result: a body of another shader under a key, a body the driver refuses, a body cut short are
each dropped, compiled from source, and replaced by the next save. Real Net (squeezenet), real
lavapipe, real files."""

from __future__ import annotations

import asyncio
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from cli_runner import cli

from asyncvk.cache import PipelineCache
from asyncvk.cache._file_entries import decode_cache
from asyncvk.cache._file_format import CacheContents, SpirvKey, encode_cache
from asyncvk.gpu import VulkanDevice
from asyncvk.gpu._instance import instance
from asyncvk.net._net import Net
from asyncvk.net._option import Option
from asyncvk.shader import ShaderOptions, builtin_shaders, compile_glsl
from asyncvk.shader._options import device_macros, option_prelude, splice_prelude

MODEL = Path(__file__).parent / "models" / "squeezenet"
#: a model with depthwise layers (convolutiondepthwise.comp), for the body of a shader with the
#: same counts of constants, buffers and push bytes
DEPTHWISE_MODEL = Path(__file__).parent / "models" / "mobilenetv2"
# A small input: the comparison is cached against uncached, not against PyTorch.
X = np.random.default_rng(7767517).standard_normal((3, 32, 32)).astype(np.float32)

_OP_ENTRY_POINT = 15
_OP_LABEL = 248


async def _infer(cache: PipelineCache, model: Path = MODEL) -> np.ndarray:
    async with Net(Option(use_vulkan_compute=True, pipeline_cache=cache)) as net:
        await net.load_param(model / "model.param")
        await net.load_model(model / "model.bin")
        ex = net.create_extractor()
        ex.input("in0", X)
        return await ex.extract("out0")


_COLD_RUNS: dict[Path, tuple[np.ndarray, CacheContents]] = {}


def _cold_run(device: VulkanDevice, model: Path) -> tuple[np.ndarray, CacheContents]:
    """``model``'s uncached output, and the cache contents that run compiled (once a model)."""
    if model not in _COLD_RUNS:
        with PipelineCache(device) as cache:
            y = asyncio.run(_infer(cache, model))
            assert cache.statistics().spirv_compiles >= 3
            data = cache.save_cache()
        result, contents = decode_cache(data, expected=device.info.identity, source_hashes=None)
        assert result and contents is not None
        _COLD_RUNS[model] = y, contents
    return _COLD_RUNS[model]


@pytest.fixture(autouse=True)
def _no_install_spirv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """These are the checks a body meets where the install compiled none for its key (a
    device-macro shader, a shader edited since the install, an install without the folder):
    with the install's SPIR-V at hand, a builtin body must be its bytes and is refused earlier
    (tests/test_cache_crafted.py)."""
    from asyncvk.shader import _packaged

    monkeypatch.setattr(_packaged, "PACKAGED_DIR", tmp_path / "no-install-spirv")


@pytest.fixture(scope="module")
def cold(device: VulkanDevice) -> tuple[np.ndarray, CacheContents]:
    """squeezenet's uncached output, and the cache contents that run compiled."""
    return _cold_run(device, MODEL)


def _key(contents: CacheContents, shader: str) -> SpirvKey:
    (key,) = (k for k in contents.spirv if k.shader == shader)
    return key


def _write(path: Path, contents: CacheContents, key: SpirvKey, body: bytes) -> None:
    """A file whose every checksum holds, with ``body`` under ``key``: what a buggy writer makes
    (the entry hash is computed over the key and the wrong body, so it matches)."""
    spirv = {**contents.spirv, key: body}
    path.write_bytes(encode_cache(CacheContents(contents.identity, spirv, contents.driver_blob)))


def _saved_spirv(path: Path, device: VulkanDevice) -> dict[SpirvKey, bytes]:
    result, contents = decode_cache(
        path.read_bytes(), expected=device.info.identity, source_hashes=None
    )
    assert result and contents is not None, result.reason
    return dict(contents.spirv)


def _warm_run(
    device: VulkanDevice, path: Path, model: Path = MODEL
) -> tuple[np.ndarray, PipelineCache]:
    """Load ``path``, run the model, save back to ``path``: one run of a deployed service."""
    cache = PipelineCache(device)
    loaded = cache.load_cache(path)
    assert loaded and loaded.entries_skipped == 0, loaded  # every checksum holds
    y = asyncio.run(_infer(cache, model))
    assert cache.save_cache(path)
    return y, cache


# -- SPIR-V surgery ----------------------------------------------------------------------------


def _words(body: bytes) -> list[int]:
    return list(struct.unpack(f"<{len(body) // 4}I", body))


def _pack(words: list[int]) -> bytes:
    return struct.pack(f"<{len(words)}I", *words)


def _instructions(words: list[int]) -> list[tuple[int, int, int]]:
    """(offset, word count, opcode) of every instruction after the 5-word header."""
    out, i = [], 5
    while i < len(words):
        out.append((i, words[i] >> 16, words[i] & 0xFFFF))
        i += words[i] >> 16
    return out


def _unknown_opcode(body: bytes) -> bytes:
    """The first instruction of the function body becomes an opcode no driver knows; the module
    still reflects to the same interface, so only the driver can refuse it."""
    words = _words(body)
    label = next(i for i, _, op in _instructions(words) if op == _OP_LABEL)
    following = label + (words[label] >> 16)
    words[following] = (words[following] & 0xFFFF0000) | 0x7FF0
    return _pack(words)


def _entry_point_renamed(body: bytes) -> bytes:
    raw = bytearray(body)
    entry = next(i for i, _, op in _instructions(_words(body)) if op == _OP_ENTRY_POINT)
    name_at = (entry + 3) * 4
    assert raw[name_at : name_at + 5] == b"main\0"
    raw[name_at : name_at + 4] = b"mian"
    return bytes(raw)


def _garbage_after_magic(body: bytes) -> bytes:
    rng = np.random.default_rng(7767517)
    return body[:4] + rng.integers(0, 256, len(body) - 4, dtype=np.uint8).tobytes()


# -- a body of another shader under a key --------------------------------------------------


def _compiled(device: VulkanDevice, shader: str) -> bytes:
    source = builtin_shaders().get(shader).source
    text = splice_prelude(source, option_prelude(ShaderOptions()))
    return compile_glsl(text, f"{shader}.comp", defines=device_macros(device.info))


@pytest.mark.parametrize(
    ("victim", "donor", "model"),
    [
        ("convolutiondepthwise", "convolution", DEPTHWISE_MODEL),
        ("convolution_tiled", "convolutiondepthwise", MODEL),
        ("pooling", "concat", MODEL),
    ],
    # convolution.comp takes as many constants, buffers and push bytes as the depthwise
    # shader: without the interface check it runs, with its constants misassigned. The tiled
    # convolution has one constant more than the depthwise shader, pooling other buffers
    # than concat: pipeline creation would refuse those bodies.
    ids=[
        "depthwise<-conv(silently wrong)",
        "conv<-depthwise(creation fails)",
        "pooling<-concat(creation fails)",
    ],
)
def test_a_body_of_another_shader_is_dropped_and_rebuilt(
    device: VulkanDevice, tmp_path: Path, victim: str, donor: str, model: Path
) -> None:
    y_cold, contents = _cold_run(device, model)
    key, path = _key(contents, victim), tmp_path / "model.vkcache"
    bad = _compiled(device, donor)
    _write(path, contents, key, bad)
    y, cache = _warm_run(device, path, model)
    with cache:
        stats = cache.statistics()
    np.testing.assert_array_equal(y, y_cold)
    assert (stats.spirv_rejected, stats.spirv_compiles) == (1, 1)
    saved = _saved_spirv(path, device)
    assert saved[key] == contents.spirv[key], "the save did not replace the bad entry"
    assert saved == contents.spirv


# -- bodies that cannot be used at all -----------------------------------------------------


@pytest.mark.parametrize(
    "damage",
    [_garbage_after_magic, _entry_point_renamed, _unknown_opcode],
    ids=["garbage_after_magic", "entry_point_renamed", "driver_refuses"],
)
def test_a_body_that_cannot_make_a_pipeline_is_dropped_and_rebuilt(
    device: VulkanDevice, cold: tuple[np.ndarray, CacheContents], tmp_path: Path, damage: object
) -> None:
    if damage is _unknown_opcode and instance().validation:
        pytest.skip("the validation layer reports the invalid SPIR-V this case feeds the driver")
    y_cold, contents = cold
    key, path = _key(contents, "pooling"), tmp_path / "model.vkcache"
    bad = damage(contents.spirv[key])  # type: ignore[operator]
    _write(path, contents, key, bad)
    y, cache = _warm_run(device, path)
    with cache:
        stats = cache.statistics()
    np.testing.assert_array_equal(y, y_cold)
    assert (stats.spirv_rejected, stats.spirv_compiles, stats.failures) == (1, 1, 0)
    saved = _saved_spirv(path, device)
    assert bad not in saved.values()
    assert saved == contents.spirv


def test_a_dropped_entry_is_not_merged_back_from_the_file(
    device: VulkanDevice, cold: tuple[np.ndarray, CacheContents], tmp_path: Path
) -> None:
    """Dropped but not rebuilt (nothing used it again): the save merges with the file on disk,
    which still holds the bad body, and must not adopt it again."""
    _, contents = cold
    key, path = _key(contents, "concat"), tmp_path / "model.vkcache"
    _write(path, contents, key, contents.spirv[_key(contents, "pooling")])
    with PipelineCache(device) as cache:
        assert cache.load_cache(path).entries_used == len(contents.spirv)
        problems = cache.check_spirv_entries()
        assert len(problems) == 1 and "'concat'" in problems[0], problems
        assert "not the shader its key names: descriptor bindings" in problems[0]
        assert cache.check_spirv_entries() == []
        assert cache.save_cache(path)
    saved = _saved_spirv(path, device)
    assert key not in saved
    assert saved == {k: v for k, v in contents.spirv.items() if k != key}


# -- the command line: verify names the entry, a run repairs the file ---------------------------


def test_verify_rejects_the_file_and_a_run_over_it_repairs_it(
    cold: tuple[np.ndarray, CacheContents], tmp_path: Path
) -> None:
    _, contents = cold
    key, path = _key(contents, "convolution_tiled"), tmp_path / "model.vkcache"
    _write(path, contents, key, contents.spirv[_key(contents, "pooling")])
    verify = cli("cache", "verify", str(path), "--json")
    assert verify.returncode == 1, verify.stdout
    verdict = json.loads(verify.stdout)
    assert not verdict["accepted"]
    assert any("'convolution_tiled'" in line for line in verdict["skipped"]), verdict
    np.save(tmp_path / "x.npy", X)
    run = cli(
        "run",
        str(MODEL / "model.param"),
        str(MODEL / "model.bin"),
        "--input",
        f"in0={tmp_path / 'x.npy'}",
        "--cache",
        str(path),
        "--json",
    )
    assert run.returncode == 0, run.stderr
    assert cli("cache", "verify", str(path)).returncode == 0
