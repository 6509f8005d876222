"""What a load may serve: an entry compiled from an older source, an entry compiled for other
device macros, and a cache-folder entry of another driver version are never used."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from conftest import IDENTITY
from pipeline_requests import build_one

from asyncvk.cache import PipelineCache, PipelineSpec, SpirvKey
from asyncvk.cache._directory import CacheDirectory
from asyncvk.cache._file_entries import decode_cache
from asyncvk.cache._file_format import CacheContents, encode_cache
from asyncvk.cache._file_inspect import describe_cache
from asyncvk.gpu import DeviceIdentity, VulkanDevice
from asyncvk.shader import ShaderRegistry


def _build(cache: PipelineCache) -> None:
    build_one(cache, PipelineSpec("scale_add", specializations=(1.0, 0)))
    build_one(cache, PipelineSpec("unary", specializations=(3, 0.0, 0.0)))


@pytest.fixture(scope="module")
def contents(device: VulkanDevice) -> CacheContents:
    """A real save of this device: one entry for scale_add, one for unary."""
    with PipelineCache(device) as cache:
        _build(cache)
        result, decoded = decode_cache(
            cache.save_cache(), expected=device.info.identity, source_hashes=None
        )
    assert result and decoded is not None and len(decoded.spirv) == 2, result.reason
    return decoded


def _with_keys(contents: CacheContents, change: dict[str, SpirvKey]) -> bytes:
    """The file with the entries of the shaders named in ``change`` filed under new keys."""
    spirv = {change.get(k.shader, k): body for k, body in contents.spirv.items()}
    return encode_cache(CacheContents(contents.identity, spirv, contents.driver_blob))


def _key(contents: CacheContents, shader: str) -> SpirvKey:
    return next(k for k in contents.spirv if k.shader == shader)


def test_an_entry_of_an_older_shader_source_is_skipped(
    device: VulkanDevice, contents: CacheContents, tmp_path: Path
) -> None:
    current = _key(contents, "unary")
    stale = dataclasses.replace(current, source_hash=current.source_hash ^ 1)
    with PipelineCache(device) as cache:
        result = cache.load_cache(_with_keys(contents, {"unary": stale}))
        assert result, result.reason
        assert (result.entries_used, result.entries_skipped) == (1, 1)
        assert "source changed" in result.skipped[0] and "'unary'" in result.skipped[0]
        assert set(cache.spirv_entries()) == {_key(contents, "scale_add")}
        _build(cache)
        assert cache.statistics().spirv_compiles == 1  # unary, from its current source
        saved = tmp_path / "resaved.vkcache"
        assert cache.save_cache(saved)
    keys = {
        (e["shader"], e["source_hash"]) for e in describe_cache(saved.read_bytes())["spirv_entries"]
    }
    assert ("unary", f"{stale.source_hash:016x}") not in keys  # not carried into new files


def test_entries_for_other_device_macros_are_not_used(
    device: VulkanDevice, contents: CacheContents
) -> None:
    current = _key(contents, "unary")
    foreign = dataclasses.replace(current, macro_hash=current.macro_hash ^ 1)
    with PipelineCache(device) as cache:
        assert current.macro_hash == cache.device_macro_hash  # the premise: a real key
        result = cache.load_cache(_with_keys(contents, {"unary": foreign}))
        assert result, result.reason
        assert (result.entries_used, result.entries_skipped) == (1, 1)
        assert any("other device macros" in line for line in result.skipped), result.skipped
        assert set(cache.spirv_entries()) == {_key(contents, "scale_add")}
        _build(cache)
        assert cache.statistics().spirv_compiles == 1


def test_a_cache_folder_entry_of_another_driver_version_is_not_served(tmp_path: Path) -> None:
    """A driver update alone (same GPU, same pipeline-cache UUID) turns the folder's file into
    a miss; each driver then keeps its own file."""
    updated = dataclasses.replace(IDENTITY, driver_version=IDENTITY.driver_version + 1)
    body = (0x07230203).to_bytes(4, "little") + bytes(64)

    def data(identity: DeviceIdentity) -> bytes:
        return encode_cache(CacheContents(identity, {SpirvKey("s", 0, 1, 2): body}, b""))

    directory = CacheDirectory(tmp_path)
    old = directory.store("m", IDENTITY, "fp", data(IDENTITY))
    assert old is not None
    missed = directory.lookup("m", updated, "fp")
    assert missed.path is None and missed.data is None, missed
    assert "no cache for this device and driver" in missed.reason
    new = directory.store("m", updated, "fp", data(updated))
    assert new is not None and new != old
    assert directory.lookup("m", updated, "fp").path == new
    assert directory.lookup("m", IDENTITY, "fp").path == old


def test_a_load_hashes_only_the_shaders_its_entries_name(tmp_path: Path) -> None:
    """A file's entries are checked against a view that reads and hashes a shader when an
    entry names it: hashing every shader and shape variant took 8 ms of a warm load on
    lavapipe's machine. Here ``b`` cannot be read; looking up the others must not try."""
    push = "layout(push_constant) uniform P { int n; } p;\n"
    (tmp_path / "a.comp").write_text(f"#version 450\n{push}void main() {{ int x = p.n; }}\n")
    (tmp_path / "b.comp").write_text('#version 450\n#include "missing.h"\nvoid main() {}\n')
    registry = ShaderRegistry(tmp_path)
    view = registry.source_hash_view()
    assert view.get("a") == registry.get("a").source_hash
    assert view.get("a@shapes") == registry.get("a@shapes").source_hash != view.get("a")
    assert view.get("c") is None and view.get("c@shapes") is None and "c" not in view
    (tmp_path / "b.comp").unlink()
    good = ShaderRegistry(tmp_path)
    expected = {"a": view["a"], "a@shapes": view["a@shapes"]}
    assert dict(good.source_hash_view()) == good.source_hashes() == expected
