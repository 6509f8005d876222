"""Cache files crafted by someone who recomputes every checksum: a miss, never a changed result.

The attack: take a cache file squeezenet saved, change the float constants of its convolution
shader's SPIR-V (the convolution then computes something else, and nothing in the module's
interface shows it), recompute the entry hash, the index hash and the header's checksum, and
put the file back. Whoever lacks this user's cache key cannot seal the header, and even with the
key, a builtin shader's body must be the install's bytes. Real Net, real lavapipe, real files.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest
from cli_runner import cli
from test_cache_content_trust import MODEL, _cold_run, _infer, _instructions, _key, _pack, _words

from asyncvk.cache import PipelineCache
from asyncvk.cache import _file_format as ff
from asyncvk.cache._cache_key import CacheKey, local_cache_key
from asyncvk.cache._file_format import CacheContents
from asyncvk.gpu import VulkanDevice

_OP_TYPE_FLOAT = 22
_OP_CONSTANT = 43
VICTIM = "convolution_tiled"


def _constants_changed(body: bytes) -> bytes:
    """Every 32-bit float constant of the module plus one: same interface, other arithmetic."""
    words = _words(body)
    instructions = _instructions(words)
    floats = {words[at + 1] for at, count, op in instructions if op == _OP_TYPE_FLOAT}
    changed = 0
    for at, count, op in instructions:
        if op == _OP_CONSTANT and count == 4 and words[at + 1] in floats:
            (value,) = struct.unpack("<f", struct.pack("<I", words[at + 3]))
            (words[at + 3],) = struct.unpack("<I", struct.pack("<f", value + 1.0))
            changed += 1
    assert changed, "the victim shader has no float constant to change"
    return _pack(words)


def _crafted(contents: CacheContents, sealer: CacheKey) -> bytes:
    """squeezenet's file with the victim's constants changed and every checksum recomputed,
    sealed with ``sealer``."""
    key = _key(contents, VICTIM)
    spirv = {**contents.spirv, key: _constants_changed(contents.spirv[key])}
    return ff.encode_cache(
        CacheContents(contents.identity, spirv, contents.driver_blob), cache_key=sealer
    )


def _resealed_without_the_key(data: bytes) -> bytes:
    """The header's checksum recomputed as plain blake2b, this user's key id kept: what someone
    who read the format description but not the key would write."""
    start = ff.HEADER_SIZE - 16
    digest = hashlib.blake2b(data[:start], digest_size=16).digest()
    return data[:start] + digest + data[ff.HEADER_SIZE :]


@pytest.fixture(scope="module")
def cold(device: VulkanDevice) -> tuple[np.ndarray, CacheContents]:
    return _cold_run(device, MODEL)


def _run_with(device: VulkanDevice, path: Path) -> tuple[np.ndarray, PipelineCache, str]:
    cache = PipelineCache(device)
    loaded = cache.load_cache(path)
    y = asyncio.run(_infer(cache, MODEL))
    return y, cache, str(loaded)


def test_the_change_alone_would_change_the_result(
    device: VulkanDevice, cold: tuple[np.ndarray, CacheContents]
) -> None:
    """The attack is real: adopted as it stands, the changed body changes squeezenet's output."""
    y_cold, contents = cold
    key = _key(contents, VICTIM)
    cache = PipelineCache(device)
    with cache.spirv._lock:
        cache.spirv._spirv[key] = _constants_changed(contents.spirv[key])
    y = asyncio.run(_infer(cache, MODEL))
    cache.close()
    assert not np.allclose(y, y_cold, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize(
    "how",
    ["sealed with another key", "checksums recomputed without the key"],
)
def test_a_file_crafted_without_the_key_is_a_miss(
    device: VulkanDevice, cold: tuple[np.ndarray, CacheContents], tmp_path: Path, how: str
) -> None:
    y_cold, contents = cold
    if how == "sealed with another key":
        data = _crafted(contents, CacheKey(b"an attacker's own key, 32 bytes!", "attacker"))
        expected = "another cache key"
    else:
        data = _resealed_without_the_key(_crafted(contents, local_cache_key()))
        expected = "authentication failed"
    path = tmp_path / "model.vkcache"
    path.write_bytes(data)
    y, cache, loaded = _run_with(device, path)
    cache.close()
    assert expected in loaded, loaded
    np.testing.assert_array_equal(y, y_cold)  # the same bytes as an uncached run computes
    verify = cli("cache", "verify", str(path), "--json")
    assert verify.returncode == 1 and expected in json.loads(verify.stdout)["reason"]


def test_a_builtin_body_sealed_with_the_key_is_still_the_installs(
    device: VulkanDevice, cold: tuple[np.ndarray, CacheContents], tmp_path: Path
) -> None:
    """Even a file this user's key sealed (a tool of theirs gone wrong, a stolen key) hands the
    driver only the install's SPIR-V for a builtin shader: the body is refused, the shader
    compiled, the result unchanged, and the next save repairs the file."""
    y_cold, contents = cold
    path = tmp_path / "model.vkcache"
    path.write_bytes(_crafted(contents, local_cache_key()))
    verify = cli("cache", "verify", str(path), "--json")
    verdict = json.loads(verify.stdout)
    assert verify.returncode == 1 and not verdict["accepted"], verdict
    assert any(VICTIM in line and "install" in line for line in verdict["skipped"]), verdict
    y, cache, loaded = _run_with(device, path)
    assert "not the SPIR-V the install compiled" in loaded, loaded
    np.testing.assert_array_equal(y, y_cold)
    assert cache.save_cache(path)
    cache.close()
    assert cli("cache", "verify", str(path)).returncode == 0
