"""The SPIR-V the install compiles (``shader/_packaged``): every shader there, byte for byte what
a load would compile, used by a cold run instead of the compiler, and a miss (never a wrong
pipeline) when a body is missing, stale or bad."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from cli_runner import cli
from pipeline_requests import build_one, run_scale_add

from asyncvk.cache import PipelineCache, PipelineSpec
from asyncvk.gpu import VulkanDevice
from asyncvk.shader import ShaderOptions, ShaderRegistry, _packaged
from asyncvk.shader._compiler import compile_builtin
from asyncvk.shader._options import device_macros
from asyncvk.shader._packaged_build import (
    LEFT_OUT,
    build_packaged,
    main,
    packaged_jobs,
    unbuilt,
)

MODELS = Path(__file__).parent / "models"
SHADERS = Path(__file__).resolve().parent.parent / "shaders"
#: What a test that reads the install's folder says when it is missing or stale: in a checkout,
#: a shader edited since the install compiles at its first use, and these tests fail.
REBUILD = "rebuild it: python -m asyncvk.shader._packaged_build (tools/install.sh does)"


def _shader_folder(tmp_path: Path, *names: str) -> Path:
    """``tmp_path/shaders`` holding the named builtin shaders and every include."""
    shaders = tmp_path / "shaders"
    shaders.mkdir()
    for path in [*(SHADERS / f"{name}.comp" for name in names), *SHADERS.glob("*.h")]:
        shutil.copy(path, shaders / path.name)
    return shaders


@pytest.fixture
def packaged_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(_packaged.ENV_SWITCH, "1")


@pytest.fixture
def packaged_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, packaged_on: None) -> Path:
    """A packaged folder of our own, built for two shaders (the install's is left alone)."""
    shaders = _shader_folder(tmp_path, "scale_add", "copy_f32")
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
    return run_scale_add(device, pipeline, np.arange(100, dtype=np.float32), 0.5)


def test_the_install_built_every_shader(packaged_on: None) -> None:
    """tools/install.sh (setup.py's build_ext) wrote the folder, complete: a file for every
    shader, shape variant and option-bit combination a Net can ask for, each in the manifest."""
    assert _packaged.packaged_complete(), f"{_packaged.PACKAGED_DIR}: not built; {REBUILD}"
    registry = ShaderRegistry()
    jobs = packaged_jobs(registry)
    assert len(jobs) >= 4 * len(registry.names())
    missing = [
        f"{name} [bits {options.bits}]"
        for name, options in jobs
        if not isinstance(_packaged.read_packaged(name, options, registry.get(name).source), bytes)
    ]
    assert missing == [], REBUILD
    assert _packaged.packaged_state()["shaders"] == len(jobs)


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
        compiled = compile_builtin(name, source, options, macros)
        if _packaged.read_packaged(name, options, source) != compiled:
            return f"{name} [bits {options.bits}]"
        return None

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
        different = [d for d in pool.map(differs, packaged_jobs(registry)) if d is not None]
    assert different == [], REBUILD


def test_a_cold_run_takes_the_package_and_never_loads_the_compiler(
    tmp_path: Path, packaged_on: None
) -> None:
    """The CLI's cold run (no cache file): no shader compiled, none of glslang's set-up, the
    compiler's binding never imported, and the output bit-identical to a compiling run's."""
    model = MODELS / "squeezenet"
    script = """
import asyncio, json, sys
import numpy as np
from asyncvk.cli import _main as cli
from asyncvk.cli._runner import RunConfig, close_net, open_net

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


def _damage(folder: Path, damage: str) -> bytes:
    """Replace scale_add's body as ``damage`` says; returns the new body."""
    target = _packaged_file(folder, "scale_add")
    body = target.read_bytes()
    if damage == "another shader's body":
        body = _packaged_file(folder, "copy_f32").read_bytes()
    elif damage == "not SPIR-V":
        body = bytes(range(256)) * 4
    elif damage == "cut at a word":
        body = body[: len(body) // 8 * 4]
    elif damage == "cut inside a word":
        body = body[: len(body) // 2 + 2]
    elif damage == "empty":
        body = b""
    elif damage == "oversized":
        body = body + bytes(_packaged.MAX_BODY_BYTES)
    if damage == "missing":
        target.unlink()
        return b"none"  # the compile writes the same bytes the file held
    target.write_bytes(body)
    return body


def _rewrite_manifest(folder: Path) -> None:
    """The manifest made to match the folder's bodies again, as someone crafting it would."""
    complete, digests = _packaged._parse_manifest(folder / _packaged.MANIFEST) or (False, {})
    fresh = {name: _packaged.body_digest((folder / name).read_bytes()) for name in digests}
    (folder / _packaged.MANIFEST).write_text(_packaged.manifest_text(fresh, complete), "ascii")


def _run_rejecting(
    device: VulkanDevice, tmp_path: Path, body: bytes, caplog: pytest.LogCaptureFixture
) -> str:
    """scale_add through a cache that must refuse the packaged body and compile: the output
    is right, the body is never saved, one warning names the shader; returns the warning."""
    with caplog.at_level(logging.WARNING, logger="asyncvk.cache"):
        with PipelineCache(device) as cache:
            y = _scale_add(cache, device)
            stats = cache.statistics()
            saved = cache.spirv_entries()
    np.testing.assert_array_equal(y, np.arange(100, dtype=np.float32) * 2 + 0.5)
    assert (stats.spirv_packaged, stats.spirv_compiles, stats.spirv_rejected) == (0, 1, 1)
    assert all(spirv != body for spirv in saved.values())  # never saved with the cache
    rejected = [r.getMessage() for r in caplog.records if "packaged SPIR-V" in r.getMessage()]
    assert len(rejected) == 1 and "'scale_add'" in rejected[0], rejected
    return rejected[0]


DAMAGES = [
    "another shader's body",
    "not SPIR-V",
    "cut at a word",
    "cut inside a word",
    "empty",
    "oversized",
    "missing",
]


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_packaged_body_fails_its_checksum(
    device: VulkanDevice,
    packaged_dir: Path,
    tmp_path: Path,
    damage: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A body that is not the one the install wrote (the manifest's blake2b) is refused before
    anything parses it, and the shader compiles."""
    body = _damage(packaged_dir, damage)
    warning = _run_rejecting(device, tmp_path, body, caplog)
    expected = (
        "unreadable" if damage == "missing" else "over" if damage == "oversized" else "blake2b"
    )
    assert expected in warning


@pytest.mark.parametrize("damage", ["another shader's body", "not SPIR-V", "cut at a word"])
def test_a_crafted_packaged_body_fails_the_interface_check(
    device: VulkanDevice,
    packaged_dir: Path,
    tmp_path: Path,
    damage: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With the manifest rewritten to match, a body still has to be the shader its name
    says: reflection and the declared interface, as for a cache file's entries."""
    body = _damage(packaged_dir, damage)
    _rewrite_manifest(packaged_dir)
    _run_rejecting(device, tmp_path, body, caplog)


def test_options_round_trip_through_their_bits() -> None:
    """The build names each job's options by their bits (``ShaderOptions.from_bits``)."""
    assert [ShaderOptions.from_bits(bits).bits for bits in range(32)] == list(range(32))
    assert ShaderOptions.from_bits(2) == ShaderOptions(use_fp16_arithmetic=True)
    for bits in (-1, 32):
        with pytest.raises(ValueError, match=f"option bits {bits} out of range"):
            ShaderOptions.from_bits(bits)


def test_a_rebuild_replaces_the_folder_whole(tmp_path: Path) -> None:
    """Built in a staging folder and put in place by renames: stale files go, the manifest
    lists what is there, and no staging folder is left behind."""
    shaders = _shader_folder(tmp_path, "scale_add")
    folder = tmp_path / "packaged_spirv"
    folder.mkdir()
    (folder / "stale.0.0000000000000000.spv").write_bytes(b"\x03\x02\x23\x07" * 8)
    registry = ShaderRegistry(shaders)
    built = build_packaged(folder, registry)
    variants = 1 + (registry.shape_variant("scale_add") is not None)
    assert built == len(packaged_jobs(registry)) == 4 * variants
    files = sorted(p.name for p in folder.iterdir())
    assert "stale.0.0000000000000000.spv" not in files
    assert len(files) == built + 1 and _packaged.MANIFEST in files
    complete, digests = _packaged._parse_manifest(folder / _packaged.MANIFEST) or (False, {})
    assert complete and sorted(digests) == sorted(f for f in files if f.endswith(".spv"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["packaged_spirv", "shaders"]


def test_a_build_never_replaces_a_folder_it_did_not_write(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "notes.txt").write_text("the user's")
    with pytest.raises(FileExistsError, match="not replaced"):
        build_packaged(folder, ShaderRegistry(SHADERS))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    assert (folder / "notes.txt").read_text() == "the user's"


def test_device_macro_shaders_are_not_packaged(tmp_path: Path, packaged_on: None) -> None:
    """A shader whose source tests a device macro compiles per device: not built, not read, and
    a folder missing it is not complete (a cold load sets the compiler up)."""
    shaders = _shader_folder(tmp_path, "scale_add")
    text = (SHADERS / "scale_add.comp").read_text()
    text = text.replace("void main() {", "#if AVK_SUBGROUP_SIZE > 64\n#endif\nvoid main() {")
    (shaders / "per_device.comp").write_text(text)
    registry = ShaderRegistry(shaders)
    assert {name for name, _ in packaged_jobs(registry)} == {"scale_add", "scale_add@shapes"}
    folder = tmp_path / "packaged_spirv"
    build_packaged(folder, registry)
    source = registry.get("per_device").source
    assert _packaged.read_packaged("per_device", ShaderOptions(), source, folder) is None
    assert not (folder / _packaged.file_name("per_device", ShaderOptions(), source)).exists()


def test_a_folder_missing_a_shader_is_not_complete(tmp_path: Path, packaged_on: None) -> None:
    """A shader that fails to compile at install is left out; the manifest then says the folder
    is not complete, so the CLI sets the compiler up for a cold run as before."""
    shaders = _shader_folder(tmp_path, "scale_add")
    (shaders / "broken.comp").write_text("#version 450\nvoid main() { undeclared = 1; }\n")
    folder = tmp_path / "packaged_spirv"
    assert build_packaged(folder, ShaderRegistry(shaders)) == 8
    assert not _packaged.packaged_complete(folder)
    assert _packaged.packaged_state(folder)["complete"] is False
    shutil.rmtree(folder)
    (shaders / "broken.comp").unlink()
    build_packaged(folder, ShaderRegistry(shaders))
    assert _packaged.packaged_complete(folder)


def _source(shaders: Path, name: str = "scale_add") -> str:
    return ShaderRegistry(shaders).get(name).source


def test_check_names_what_the_folder_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--check`` (tools/install.sh runs it: pip -q hides setup.py's warning) builds nothing and
    exits 1 naming the shaders with no file: never built, or edited since the build."""
    shaders = _shader_folder(tmp_path, "scale_add")
    folder = tmp_path / "packaged_spirv"
    check = ["--check", str(folder), "--shaders", str(shaders)]
    assert main(check) == 1
    assert "lacks 8 of 8 shader builds (scale_add [bits 0]" in capsys.readouterr().err
    assert not folder.exists()
    assert main([str(folder), "--shaders", str(shaders)]) == 0
    assert main(check) == 0 and "holds all 8 shader builds" in capsys.readouterr().out
    gone = _packaged.file_name("scale_add", ShaderOptions.from_bits(1), _source(shaders))
    (folder / gone).rename(tmp_path / gone)
    assert unbuilt(folder, ShaderRegistry(shaders)) == ["scale_add [bits 1]"]
    (tmp_path / gone).rename(folder / gone)
    source = shaders / "scale_add.comp"
    source.write_text(source.read_text().replace("void main() {", "void main() {\n    // edited"))
    assert unbuilt(folder, ShaderRegistry(shaders)) == [
        f"{name} [bits {bits}]" for bits in range(4) for name in ("scale_add", "scale_add@shapes")
    ]
    assert main(check) == 1 and "edited since" in capsys.readouterr().err


def test_a_build_that_leaves_a_shader_out_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its own exit status, which setup.py's warning tells from a build that failed."""
    shaders = _shader_folder(tmp_path, "scale_add")
    (shaders / "broken.comp").write_text("#version 450\nvoid main() { undeclared = 1; }\n")
    folder = tmp_path / "packaged_spirv"
    assert main([str(folder), "--shaders", str(shaders)]) == LEFT_OUT == 3
    err = capsys.readouterr().err
    assert "4 of 12 left out" in err and "compile at their first use" in err
    assert unbuilt(folder, ShaderRegistry(shaders)) == [f"broken [bits {b}]" for b in range(4)]


@pytest.mark.parametrize("switch", ["1", "0"])
def test_asyncvk_info_reports_the_folder(switch: str) -> None:
    out = cli("info", "--json", timeout=120, env={_packaged.ENV_SWITCH: switch})
    assert out.returncode == 0, out.stderr
    state = json.loads(out.stdout)["packaged_spirv"]
    assert state["folder"] == str(_packaged.PACKAGED_DIR)
    assert state["shaders"] == len(packaged_jobs(ShaderRegistry())), REBUILD
    assert state["enabled"] is (switch == "1") and state["complete"] is True
