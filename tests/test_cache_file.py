"""The cache file: round trip, and a corruption matrix where every case is a miss with a reason."""

from __future__ import annotations

import dataclasses
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from asyncvk.cache import PipelineCache
from asyncvk.cache._file_format import (
    _HEADER,
    HEADER_FIELDS,
    HEADER_SIZE,
    CacheContents,
    _hash16,
    decode_cache,
    describe_cache,
    encode_cache,
)
from asyncvk.gpu import CommandRecorder, VulkanDevice

SPECS = [(float(i), i) for i in range(4)]


def _build(cache: PipelineCache) -> None:
    for spec in SPECS:
        cache.get_pipeline_sync("scale_add", specializations=spec, local_size=(32, 1, 1))
    cache.get_pipeline_sync("unary", specializations=(3, 0.0, 0.0), local_size=(32, 1, 1))


def _outputs(device: VulkanDevice, cache: PipelineCache) -> list[np.ndarray]:
    x = np.linspace(-3, 3, 257, dtype=np.float32)
    results = []
    for spec in SPECS:
        pipeline = cache.get_pipeline_sync("scale_add", specializations=spec, local_size=(32, 1, 1))
        src = device.upload_sync(x)
        dst = device.allocate(x.nbytes)
        rec = CommandRecorder(device, one_time=True)
        rec.dispatch(pipeline, [src, dst], struct.pack("<if", x.size, 0.25), (9, 1, 1))
        device.run_sync(rec.finish())
        results.append(device.download_sync(dst, x.shape))
        rec.release()
        src.release()
        dst.release()
    return results


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory, device: VulkanDevice) -> Path:
    path = tmp_path_factory.mktemp("cache") / "model.vkcache"
    with PipelineCache(device) as cache:
        _build(cache)
        assert cache.save_cache(path)
    return path


def test_round_trip_compiles_no_glsl_and_gives_identical_outputs(
    device: VulkanDevice, saved: Path
) -> None:
    with PipelineCache(device) as cold:
        cold_out = _outputs(device, cold)
    with PipelineCache(device) as warm:
        result = warm.load_cache(saved)
        assert result, result.reason
        assert result.entries_used == 2
        warm_out = _outputs(device, warm)
        _build(warm)
        assert warm.statistics().spirv_compiles == 0
        assert warm.statistics().spirv_hits >= 1
    for a, b in zip(cold_out, warm_out, strict=True):
        assert a.tobytes() == b.tobytes()


def test_load_from_bytes_and_file_object(device: VulkanDevice, saved: Path) -> None:
    data = saved.read_bytes()
    with PipelineCache(device) as cache:
        assert cache.load_cache(data)
    with PipelineCache(device) as cache, open(saved, "rb") as f:
        assert cache.load_cache(f)


def test_save_to_bytes_matches_the_format(device: VulkanDevice) -> None:
    with PipelineCache(device) as cache:
        _build(cache)
        data = cache.save_cache()
        info = describe_cache(data)
    assert info["valid"]
    assert {e["shader"] for e in info["spirv_entries"]} == {"scale_add", "unary"}
    assert info["header"]["vendor_id"] == device.info.vendor_id


# -- the corruption matrix -----------------------------------------------------------------


def _offsets() -> dict[str, tuple[int, int]]:
    fmt = _HEADER.format[1:]
    out = {}
    offset = 0
    codes = []
    i = 0
    while i < len(fmt):
        j = i
        while fmt[j].isdigit():
            j += 1
        codes.append(fmt[i : j + 1])
        i = j + 1
    for name, code in zip(HEADER_FIELDS, codes, strict=True):
        size = struct.calcsize("<" + code)
        out[name] = (offset, size)
        offset += size
    return out


OFFSETS = _offsets()


def _layout(data: bytes) -> dict[str, int]:
    h = dict(zip(HEADER_FIELDS, _HEADER.unpack_from(data, 0), strict=True))
    index_end = HEADER_SIZE + h["index_size"]
    bodies_end = index_end + h["bodies_size"]
    return {
        "header": HEADER_SIZE,
        "index": index_end,
        "bodies": bodies_end,
        "blob": bodies_end + h["driver_blob_size"],
    }


def _reseal(data: bytearray) -> bytes:
    """Recompute the header checksum, so a patched field is judged on its own."""
    start, size = OFFSETS["header_hash"]
    data[start : start + size] = _hash16(bytes(data[:start]))
    return bytes(data)


def _expect_miss(device: VulkanDevice, data: bytes, needle: str) -> None:
    with PipelineCache(device) as cache:
        result = cache.load_cache(data)
        assert not result, "a damaged file was accepted"
        assert needle in result.reason, result.reason
        assert cache.spirv_entries() == {}, "a rejected file committed entries"
        # the cache still works: a miss, not a failure
        pipeline = cache.get_pipeline_sync("scale_add", specializations=(1.0, 0))
        assert pipeline.handle


def test_truncation_at_every_boundary_and_mid_section(device: VulkanDevice, saved: Path) -> None:
    data = saved.read_bytes()
    layout = _layout(data)
    cuts = {0, 1, HEADER_SIZE - 1, HEADER_SIZE, len(data) - 1}
    previous = 0
    for end in layout.values():
        cuts |= {end - 1, end, (previous + end) // 2}
        previous = end
    for cut in sorted(c for c in cuts if 0 <= c < len(data)):
        with PipelineCache(device) as cache:
            result = cache.load_cache(data[:cut])
            assert not result, f"truncation at {cut} of {len(data)} was accepted"
            assert result.reason


@pytest.mark.parametrize("field", [f for f in HEADER_FIELDS if f != "header_hash"])
def test_bit_flip_in_every_header_field_is_caught_by_the_checksum(
    device: VulkanDevice, saved: Path, field: str
) -> None:
    data = bytearray(saved.read_bytes())
    start, _size = OFFSETS[field]
    data[start] ^= 0x01
    _expect_miss(device, bytes(data), "")


@pytest.mark.parametrize(
    ("field", "value", "needle"),
    [
        ("magic", b"NOTACACH", "bad magic"),
        ("format_version", 99, "format version"),
        ("endian", 0x04030201, "endian"),
        ("pointer_size", 4, "pointer size"),
        ("asyncvk_version", b"0.0.0-other".ljust(16, b"\0"), "written by asyncvk"),
        ("vendor_id", 0x10DE, "vendor_id"),
        ("device_id", 0x2330, "device_id"),
        ("driver_version", 12345, "driver_version"),
        ("driver_id", 99, "driver_id"),
        ("pipeline_cache_uuid", b"\xee" * 16, "pipeline_cache_uuid"),
        ("index_size", 1 << 30, "declared sections end"),
        ("bodies_size", 1 << 30, "declared sections end"),
        ("driver_blob_size", 1 << 30, "declared sections end"),
    ],
)
def test_wrong_field_values_are_rejected_with_the_field_named(
    device: VulkanDevice, saved: Path, field: str, value: object, needle: str
) -> None:
    data = bytearray(saved.read_bytes())
    start, size = OFFSETS[field]
    if isinstance(value, bytes):
        data[start : start + size] = value
    else:
        data[start : start + size] = int(value).to_bytes(size, "little")  # type: ignore[call-overload]
    _expect_miss(device, _reseal(data), needle)


def test_bit_flip_in_the_index_rejects_the_file(device: VulkanDevice, saved: Path) -> None:
    data = bytearray(saved.read_bytes())
    data[HEADER_SIZE + 3] ^= 0x10
    _expect_miss(device, bytes(data), "index checksum")


def test_bit_flip_in_the_driver_blob_rejects_the_file(device: VulkanDevice, saved: Path) -> None:
    data = bytearray(saved.read_bytes())
    layout = _layout(bytes(data))
    if layout["blob"] == layout["bodies"]:
        pytest.skip("this driver saves no pipeline cache data")
    data[layout["blob"] - 1] ^= 0x01
    _expect_miss(device, bytes(data), "driver blob checksum")


def test_damaged_spirv_entry_is_skipped_alone(device: VulkanDevice, saved: Path) -> None:
    data = bytearray(saved.read_bytes())
    layout = _layout(bytes(data))
    data[layout["index"] + 40] ^= 0x01  # inside the first SPIR-V body
    with PipelineCache(device) as cache:
        result = cache.load_cache(bytes(data))
        assert result, result.reason
        assert result.entries_used == 1 and result.entries_skipped == 1
        assert "checksum" in result.skipped[0]
        _build(cache)  # the damaged one is rebuilt; outputs stay right
        assert cache.statistics().spirv_compiles == 1
        x = _outputs(device, cache)
    np.testing.assert_allclose(
        x[2], np.linspace(-3, 3, 257, dtype=np.float32) * 2 + 2.25, rtol=1e-6
    )


def test_changed_shader_source_skips_only_that_entry(device: VulkanDevice, saved: Path) -> None:
    with PipelineCache(device) as cache:
        result, contents = decode_cache(
            saved.read_bytes(), expected=device.info.identity, source_hashes=None
        )
        assert contents is not None
        hashes = dict(cache.registry.source_hashes())
        hashes["unary"] ^= 1
        result, _ = decode_cache(
            saved.read_bytes(), expected=device.info.identity, source_hashes=hashes
        )
        assert result.entries_used == 1
        assert "source changed" in result.skipped[0]


def test_trailing_garbage_zero_length_directory_and_sparse_file(
    device: VulkanDevice, saved: Path, tmp_path: Path
) -> None:
    _expect_miss(device, saved.read_bytes() + b"\0garbage", "trailing bytes")
    _expect_miss(device, b"", "empty")
    with PipelineCache(device) as cache:
        assert "directory" in cache.load_cache(tmp_path).reason
        sparse = tmp_path / "sparse.vkcache"
        with open(sparse, "wb") as f:
            f.truncate(2 << 30)
        result = cache.load_cache(sparse)
        assert not result and "limit" in result.reason
        missing = cache.load_cache(tmp_path / "nope.vkcache")
        assert not missing and "does not exist" in missing.reason


def test_another_devices_identity_is_rejected(device: VulkanDevice, saved: Path) -> None:
    _result, contents = decode_cache(
        saved.read_bytes(), expected=device.info.identity, source_hashes=None
    )
    assert contents is not None
    other = dataclasses.replace(contents.identity, device_name="Another GPU")
    data = encode_cache(CacheContents(other, contents.spirv, contents.driver_blob))
    _expect_miss(device, data, "device_name_hash")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "asyncvk", *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
    )


def test_cache_verify_and_inspect_cli(saved: Path, tmp_path: Path) -> None:
    ok = _cli("cache", "verify", str(saved))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = tmp_path / "bad.vkcache"
    data = bytearray(saved.read_bytes())
    data[10] ^= 0xFF
    bad.write_bytes(bytes(data))
    rejected = _cli("cache", "verify", str(bad))
    assert rejected.returncode == 1
    assert "rejected" in rejected.stdout
    truncated = tmp_path / "short.vkcache"
    truncated.write_bytes(saved.read_bytes()[:-3])
    assert _cli("cache", "verify", str(truncated)).returncode == 1
    inspect = _cli("cache", "inspect", str(saved), "--json")
    assert inspect.returncode == 0
    assert '"scale_add"' in inspect.stdout and '"accepted": true' in inspect.stdout
