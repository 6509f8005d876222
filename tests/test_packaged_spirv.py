"""The SPIR-V the install compiles (``shader/_packaged``): every shader there, byte for byte what
a load would compile, used by a cold run instead of the compiler, and a miss (never a wrong
pipeline) when a body is missing, stale or bad."""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from pipeline_requests import build_one

from asyncvk.cache import PipelineCache, PipelineSpec
from asyncvk.gpu import CommandRecorder, VulkanDevice
from asyncvk.shader import ShaderOptions, ShaderRegistry, _packaged
from asyncvk.shader._compiler import TargetEnv, compile_glsl
from asyncvk.shader._options import compilable_source, device_macros
from asyncvk.shader._packaged_build import build_packaged, packaged_jobs

MODELS = Path(__file__).parent / "models"
SHADERS = Path(__file__).resolve().parent.parent / "shaders"


@pytest.fixture
def packaged_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_packaged.ENV_SWITCH, "1")


@pytest.fixture
def packaged_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, packaged_on: None) -> Path:
    """A packaged folder of our own, built for two shaders (the install's is left alone)."""
    shaders = tmp_path / "shaders"
    shaders.mkdir()
    for path in [SHADERS / "scale_add.comp", SHADERS / "copy_f32.comp", *SHADERS.glob("*.h")]:
        shutil.copy(path, shaders / path.name)
    folder = tmp_path / "packaged_spirv"
    build_packaged(folder, ShaderRegistry(shaders))
    monkeypatch.setattr(_packaged, "PACKAGED_DIR", folder)
    return folder


def _packaged_file(folder: Path, shader: str, options: ShaderOptions | None = None) -> Path:
    source = ShaderRegistry().get(shader).source
    return folder / _packaged.file_name(shader, options or ShaderOptions(), source)


def _scale_add(cache: PipelineCache, device: VulkanDevice) -> np.ndarray:
    """Run ``scale_add`` (y = x * 2 + 0.5) through a pipeline of ``cache``."""
    pipeline = build_one(
        cache, PipelineSpec("scale_add", specializations=(2.0, 0), local_size=(32, 1, 1))
    )
    x = np.arange(100, dtype=np.float32)
    src, dst = device.upload_sync(x), device.allocate(x.nbytes)
    rec = CommandRecorder(device, one_time=True)
    try:
        rec.dispatch(pipeline, [src, dst], struct.pack("<if", x.size, 0.5), (4, 1, 1))
        device.run_sync(rec.finish())
        return device.download_sync(dst, x.shape)
    finally:
        rec.release()
        src.release()
        dst.release()


def test_the_install_built_every_shader(packaged_on: None) -> None:
    """tools/install.sh (setup.py's build_ext) wrote the folder, complete: a file for every
    shader, shape variant and option-bit combination a Net can ask for."""
    assert _packaged.packaged_complete(), f"{_packaged.PACKAGED_DIR} was not built by the install"
    registry = ShaderRegistry()
    jobs = packaged_jobs(registry)
    assert len(jobs) >= 4 * len(registry.names())
    missing = [
        f"{name} [bits {options.bits}]"
        for name, options in jobs
        if not (
            _packaged.PACKAGED_DIR / _packaged.file_name(name, options, registry.get(name).source)
        ).is_file()
    ]
    assert missing == []
    assert (_packaged.PACKAGED_DIR / _packaged.MANIFEST).read_text().strip() == str(len(jobs))


def test_every_packaged_body_is_what_this_device_would_compile(
    device: VulkanDevice, packaged_on: None
) -> None:
    """The folder is built with no device at hand: byte for byte the SPIR-V a load here compiles
    (its device macros defined), for every file."""
    registry = ShaderRegistry()
    macros = device_macros(device.info)

    def differs(job: tuple[str, ShaderOptions]) -> str | None:
        name, options = job
        source = registry.get(name).source
        compiled = compile_glsl(
            compilable_source(source, options),
            f"{name}.comp",
            defines=macros,
            target_env=TargetEnv.VULKAN_1_1,
        )
        if _packaged.read_packaged(name, options, source) != compiled:
            return f"{name} [bits {options.bits}]"
        return None

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        different = [d for d in pool.map(differs, packaged_jobs(registry)) if d is not None]
    assert different == []


def test_a_cold_run_takes_the_package_and_never_loads_the_compiler(
    tmp_path: Path, packaged_on: None
) -> None:
    """The CLI's cold run (no cache file): no shader compiled, none of glslang's set-up, the
    compiler's binding never imported, and the output bit-identical to a compiling run's."""
    model = MODELS / "squeezenet"
    script = """
import asyncio, json, sys
import numpy as np
from asyncvk import cli
from asyncvk._runner import RunConfig, close_net, open_net

async def main():
    args = cli.build_parser().parse_args(["run", *sys.argv[1:3], "--cache", sys.argv[3]])
    cli._start_opening_device(args)
    opened = await open_net(RunConfig(sys.argv[1], sys.argv[2], cache_file=sys.argv[3]))
    ex = opened.net.create_extractor()
    ex.input("in0", np.load(sys.argv[4]))
    np.save(sys.argv[5], await ex.extract("out0"))
    stats = opened.cache.statistics()
    compiler = "asyncvk.shader._compiler" in sys.modules
    await close_net(opened)
    print(json.dumps([stats.spirv_compiles, stats.spirv_packaged, compiler]))

asyncio.run(main())
"""

    def run(switch: str, label: str) -> tuple[list[object], np.ndarray]:
        files = [model / "model.param", model / "model.bin", tmp_path / f"{label}.vkcache"]
        argv = [*map(str, files), str(model / "input.npy"), str(tmp_path / f"{label}.npy")]
        env = dict(os.environ, **{_packaged.ENV_SWITCH: switch})
        out = subprocess.run(
            [sys.executable, "-c", script, *argv],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
            env=env,
        )
        return json.loads(out.stdout.strip().splitlines()[-1]), np.load(tmp_path / f"{label}.npy")

    (compiled, packaged, compiler), y = run("1", "packaged")
    assert (compiled, compiler) == (0, False)
    assert isinstance(packaged, int) and packaged >= 3
    (compiled, packaged, compiler), y_compiled = run("0", "compiled")
    assert (packaged, compiler) == (0, True)
    assert isinstance(compiled, int) and compiled >= 3
    assert np.array_equal(y, y_compiled)


def test_switched_off_every_shader_compiles(
    device: VulkanDevice, packaged_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(_packaged.ENV_SWITCH, "0")
    assert not _packaged.packaged_complete(packaged_dir)
    with PipelineCache(device) as cache:
        _scale_add(cache, device)
        stats = cache.statistics()
    assert (stats.spirv_packaged, stats.spirv_compiles) == (0, 1)
    with PipelineCache(device, packaged_spirv=False) as cache:
        monkeypatch.setenv(_packaged.ENV_SWITCH, "1")
        _scale_add(cache, device)
        assert cache.statistics().spirv_compiles == 1


def test_a_packaged_body_is_adopted_and_saved_with_the_cache(
    device: VulkanDevice, packaged_dir: Path, tmp_path: Path
) -> None:
    with PipelineCache(device) as cache:
        y = _scale_add(cache, device)
        stats = cache.statistics()
        assert (stats.spirv_packaged, stats.spirv_compiles) == (1, 0)
        cache.save_cache(tmp_path / "c.vkcache")
    np.testing.assert_array_equal(y, np.arange(100, dtype=np.float32) * 2 + 0.5)
    with PipelineCache(device) as warm:
        warm.load_cache(tmp_path / "c.vkcache")
        _scale_add(warm, device)
        stats = warm.statistics()
    assert (stats.spirv_hits, stats.spirv_packaged, stats.spirv_compiles) == (1, 0, 0)


def test_an_edited_shader_names_no_packaged_file(
    device: VulkanDevice, packaged_dir: Path, tmp_path: Path
) -> None:
    """The file name hashes the text compiled: an edit (here a comment) misses, and compiles."""
    edited = tmp_path / "edited"
    shutil.copytree(packaged_dir.parent / "shaders", edited)
    path = edited / "scale_add.comp"
    path.write_text(path.read_text() + "\n// edited\n")
    with PipelineCache(device, registry=ShaderRegistry(edited)) as cache:
        _scale_add(cache, device)
        stats = cache.statistics()
    assert (stats.spirv_packaged, stats.spirv_compiles) == (0, 1)


@pytest.mark.parametrize(
    "damage",
    ["another shader's body", "not SPIR-V", "truncated", "empty", "oversized"],
)
def test_a_bad_packaged_body_is_a_miss_never_a_wrong_pipeline(
    device: VulkanDevice,
    packaged_dir: Path,
    tmp_path: Path,
    damage: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    target = _packaged_file(packaged_dir, "scale_add")
    body = target.read_bytes()
    if damage == "another shader's body":
        body = _packaged_file(packaged_dir, "copy_f32").read_bytes()
    elif damage == "not SPIR-V":
        body = bytes(range(256)) * 4
    elif damage == "truncated":
        body = body[: len(body) // 2 + 2]
    elif damage == "empty":
        body = b""
    else:
        body = body + bytes(_packaged.MAX_BODY_BYTES)
    target.write_bytes(body)
    with caplog.at_level(logging.WARNING, logger="asyncvk.cache"):
        with PipelineCache(device) as cache:
            y = _scale_add(cache, device)
            stats = cache.statistics()
            cache.save_cache(tmp_path / "c.vkcache")
            saved = cache.spirv_entries()
    np.testing.assert_array_equal(y, np.arange(100, dtype=np.float32) * 2 + 0.5)
    assert (stats.spirv_packaged, stats.spirv_compiles) == (0, 1)
    assert all(spirv != body for spirv in saved.values())  # never saved with the cache
    rejected = [r.getMessage() for r in caplog.records if "packaged SPIR-V" in r.getMessage()]
    if damage in ("another shader's body", "not SPIR-V"):
        assert stats.spirv_rejected == 1 and len(rejected) == 1, rejected
        assert "'scale_add'" in rejected[0]
    else:  # not plausibly SPIR-V by its size: read as no file
        assert stats.spirv_rejected == 0 and rejected == []


def test_a_rebuild_replaces_the_folder_whole(tmp_path: Path) -> None:
    """Built in a staging folder and put in place by renames: stale files go, the manifest
    counts what is there, and no staging folder is left behind."""
    shaders = tmp_path / "shaders"
    shaders.mkdir()
    for path in [SHADERS / "scale_add.comp", *SHADERS.glob("*.h")]:
        shutil.copy(path, shaders / path.name)
    folder = tmp_path / "packaged_spirv"
    folder.mkdir()
    (folder / "stale.0.0000000000000000.spv").write_bytes(b"\x03\x02\x23\x07" * 8)
    registry = ShaderRegistry(shaders)
    built = build_packaged(folder, registry)
    assert (
        built
        == len(packaged_jobs(registry))
        == 4 * (1 + (registry.shape_variant("scale_add") is not None))
    )
    files = sorted(p.name for p in folder.iterdir())
    assert "stale.0.0000000000000000.spv" not in files
    assert len(files) == built + 1 and _packaged.MANIFEST in files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["packaged_spirv", "shaders"]


@pytest.mark.parametrize("switch", ["1", "0"])
def test_asyncvk_info_reports_the_folder(switch: str) -> None:
    env = dict(os.environ, **{_packaged.ENV_SWITCH: switch})
    out = subprocess.run(
        [sys.executable, "-m", "asyncvk", "info", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=env,
    )
    state = json.loads(out.stdout)["packaged_spirv"]
    assert state["folder"] == str(_packaged.PACKAGED_DIR)
    assert state["shaders"] == len(packaged_jobs(ShaderRegistry()))
    assert state["enabled"] is (switch == "1")
