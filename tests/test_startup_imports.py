"""What the way to a first result imports, checked in fresh processes: the start-up budget
is spent on imports where it is not watched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MODELS = Path(__file__).parent / "models"


def _fresh(script: str, *args: str) -> str:
    """The last line ``script`` prints, run with ``args`` in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return out.stdout.strip().splitlines()[-1]


def test_the_device_opens_without_numpy() -> None:
    """The CLI opens the device on a thread while the main thread imports numpy; had opening
    it needed numpy, that thread would wait for the import (up to 33 ms seen on the H100)."""
    script = (
        "import sys\n"
        "from asyncvk.gpu._device import get_gpu_device\n"
        "get_gpu_device()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'numpy')[:3])"
    )
    assert _fresh(script) == "[]"


def test_the_device_opens_without_asyncio() -> None:
    """asyncio's imports (ssl among them) cost about 50 ms on the H100; the main thread makes
    them beside the device thread, which must not wait for them."""
    script = (
        "import sys\n"
        "from asyncvk.gpu._device import get_gpu_device\n"
        "get_gpu_device()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('asyncio', 'ssl'))[:3])"
    )
    assert _fresh(script) == "[]"


def test_the_driver_loads_before_the_vulkan_binding_is_imported() -> None:
    """The loader's first call (the driver's one-time load) runs through ctypes, so it starts
    before the ``vulkan`` binding's 15-20 ms import; after it the driver is in the process."""
    script = (
        "import sys\n"
        "from asyncvk.gpu import _driver_load\n"
        "_driver_load.start()\n"
        "_driver_load.wait()\n"
        "import glob, json, os\n"
        "paths = os.environ.get('VK_DRIVER_FILES') or os.environ.get('VK_ICD_FILENAMES') or ''\n"
        "manifests = [p for p in paths.split(os.pathsep) if p]\n"
        "manifests = manifests or glob.glob('/usr/share/vulkan/icd.d/*.json')\n"
        "libs = [json.load(open(m))['ICD']['library_path'] for m in manifests]\n"
        "drivers = {os.path.basename(lib) for lib in libs}\n"
        "maps = open('/proc/self/maps').read()\n"
        "print('vulkan' in sys.modules, 'libvulkan.so' in maps, any(d in maps for d in drivers))"
    )
    assert _fresh(script) == "False True True"


def test_a_first_result_never_imports_anyio() -> None:
    """anyio's asyncio backend cost 20-50 ms of start-up; the path to a first output has none."""
    model = MODELS / "squeezenet"
    script = f"""
import asyncio, sys
import numpy as np
from asyncvk import Net

async def main():
    async with Net() as net:
        await net.load_param({str(model / "model.param")!r})
        await net.load_model({str(model / "model.bin")!r})
        ex = net.create_extractor()
        ex.input("in0", np.load({str(model / "input.npy")!r}))
        await ex.extract("out0")

asyncio.run(main())
print(sorted(m for m in sys.modules if m.split(".")[0] == "anyio"))
"""
    assert _fresh(script) == "[]"


def test_a_cold_run_sets_up_the_compiler_beside_the_imports(tmp_path: Path) -> None:
    """glslang's one-time set-up (its first compile, about 80 ms) waited for the imports and
    then held up every compile of a cold load; the CLI now starts it with the device, so it
    finishes while the main thread has not imported numpy."""
    model = MODELS / "squeezenet"
    argv = ["run", str(model / "model.param"), str(model / "model.bin")]
    argv += ["--cache", str(tmp_path / "absent.vkcache")]
    script = f"""
import sys, time
from asyncvk.cli import _main as cli
from asyncvk.cli._report import _marks
args = cli.build_parser().parse_args({argv!r})
cli._start_opening_device(args)
deadline = time.monotonic() + 30
while "compiler_ready" not in _marks and time.monotonic() < deadline:
    time.sleep(0.005)
print("compiler_ready" in _marks, "numpy" in sys.modules)
"""
    assert _fresh(script) == "True False"


def test_only_a_run_that_will_compile_sets_up_the_compiler(tmp_path: Path) -> None:
    """A warm run (its cache file exists) starts no set-up at the CLI's first lines, beside its
    imports and the driver (nor later, unless the file held no SPIR-V: the next test)."""
    from asyncvk.cli import _main as cli

    model = MODELS / "squeezenet"
    cache = tmp_path / "c.vkcache"
    run = ["run", str(model / "model.param"), str(model / "model.bin")]
    parser = cli.build_parser()
    assert cli._will_compile(parser.parse_args([*run, "--cache", str(cache)]))
    assert cli._will_compile(parser.parse_args([*run, "--cache-dir", str(tmp_path)]))
    cache.write_bytes(b"")
    assert not cli._will_compile(parser.parse_args([*run, "--cache", str(cache)]))


def test_with_a_remote_cache_the_set_up_waits_unless_the_store_is_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store that answers most likely holds every entry: glslang's set-up (0.1 s of C,
    5-10% of a warm start on the H100) is left to a first compile. One that is down means the
    load compiles: the set-up starts early, as without a remote cache. Both the CLI's first
    lines and a Net's load_param ask."""
    from redis_server import RedisServer, free_port

    from asyncvk.cache._early_setup import local_cache_empty, set_up_early

    monkeypatch.delenv("ASYNCVK_REMOTE_CACHE", raising=False)
    down = f"redis://127.0.0.1:{free_port()}/0"
    server = RedisServer(tmp_path, "--unixsocket", str(tmp_path / "r.sock"))
    try:
        assert not set_up_early(server.url)
        assert not set_up_early(f"unix://{tmp_path / 'r.sock'}?db=0")
        monkeypatch.setenv("ASYNCVK_REMOTE_CACHE", server.url)
        assert not set_up_early(None)
        monkeypatch.delenv("ASYNCVK_REMOTE_CACHE")
        assert set_up_early(None) and set_up_early("")
        assert set_up_early(down) and set_up_early(f"unix://{tmp_path / 'absent.sock'}")
        assert set_up_early("ftp://not-a-store")  # the load reports it, and compiles
        (tmp_path / "full").mkdir()
        (tmp_path / "full" / "x").write_bytes(b"")
        (tmp_path / "empty").mkdir()
        # a local cache that holds anything most likely serves the load: the store is not asked
        assert not set_up_early(down, cache_dir=str(tmp_path / "full"))
        assert not set_up_early(down, cache_file=str(tmp_path / "full" / "x"))
        assert set_up_early(down, cache_dir=str(tmp_path / "empty"))
        assert not local_cache_empty(None, str(tmp_path / "full"))
        assert local_cache_empty(None, str(tmp_path / "empty"))
        assert local_cache_empty(None, str(tmp_path / "absent")) and local_cache_empty(None, None)
        assert local_cache_empty(str(tmp_path / "absent.vkcache"), str(tmp_path / "full"))
        assert not local_cache_empty(str(tmp_path / "full" / "x"), None)
        with monkeypatch.context() as m:  # unreadable (as root, permissions do not stop it)
            m.setattr(os, "scandir", lambda _: (_ for _ in ()).throw(PermissionError(13, "no")))
            assert local_cache_empty(None, str(tmp_path / "full"))
        param = str(MODELS / "squeezenet" / "model.param")
        for url, started in ((server.url, "False"), (down, "True"), ("", "True")):
            assert _fresh(PREPARED_BY_THE_CLI, url) == started, url
            assert _fresh(PREPARED_BY_A_NET, url, param) == started, url
    finally:
        server.stop()


#: The CLI's first lines for a run with no local cache, then whether glslang was set up.
PREPARED_BY_THE_CLI = """
import sys, threading
from asyncvk.cli import _main as cli
import asyncvk.shader._compiler as compiler
args = cli.build_parser().parse_args(["run", "p", "b", "--remote-cache", sys.argv[1]])
cli._start_opening_device(args)
for t in threading.enumerate():
    if t.name == "asyncvk-prepare-compiler":
        t.join(30)
print(compiler._warm_up is not None)
"""

#: A Net's load_param with no local cache, then whether glslang was set up.
PREPARED_BY_A_NET = """
import asyncio, sys, threading
import asyncvk.shader._compiler as compiler
from asyncvk import Net, Option

async def main():
    net = Net(Option(remote_cache=sys.argv[1]))
    await net.load_param(sys.argv[2])
    for t in threading.enumerate():
        if t.name == "asyncvk-probe-store":
            t.join(30)
    print(compiler._warm_up is not None)

asyncio.run(main())
"""


WARM_OPEN = """
import asyncio, sys
import asyncvk.shader._compiler as compiler
from asyncvk.cli._runner import RunConfig, close_net, open_net

async def main():
    opened = await open_net(RunConfig(sys.argv[1], sys.argv[2], cache_file=sys.argv[3]))
    await close_net(opened)
    print(opened.report["cache_reason"], compiler._warm_up is not None)

asyncio.run(main())
"""


def test_a_warm_run_sets_up_the_compiler_only_when_its_file_held_no_spirv(
    tmp_path: Path,
) -> None:
    """The runner attaches the cache file after ``load_param``, which used to start glslang's
    set-up regardless (on lavapipe's 2-core machine it slowed a warm load by 25 ms); now the
    rule is applied once the file is in: a file that loads starts none, a refused one does."""
    model = MODELS / "squeezenet"
    cache = tmp_path / "c.vkcache"
    args = [str(model / "model.param"), str(model / "model.bin"), str(cache)]
    assert _fresh(WARM_OPEN, *args).endswith("True")  # no file: a cold run
    assert _fresh(WARM_OPEN, *args) == "loaded False"
    cache.write_bytes(b"not a cache file")
    reason, started = _fresh(WARM_OPEN, *args).rsplit(" ", 1)
    assert reason != "loaded" and started == "True"


WARM_RESULT = """
import asyncio, sys
import numpy as np
from asyncvk.cli import _main as cli
from asyncvk.cli._runner import RunConfig, close_net, open_net

async def main():
    cli.build_parser().parse_args(["run", *sys.argv[1:3], "--cache", sys.argv[3]])
    opened = await open_net(RunConfig(sys.argv[1], sys.argv[2], cache_file=sys.argv[3]))
    ex = opened.net.create_extractor()
    ex.input("in0", np.load(sys.argv[4]))
    await ex.extract("out0")
    print(opened.report["cache_reason"], sorted(m for m in sys.argv[5:] if m in sys.modules))
    await close_net(opened)

asyncio.run(main())
"""

#: Imported by a warm run's load once, 5.6 ms on lavapipe's machine: uuid and secrets (with
#: random and hmac) for random file names (os.urandom now), difflib for an error's hint and the
#: remote store's module for a check of one environment variable; and shutil (with zlib, bz2
#: and lzma, 2.6 ms), which argparse imports for its help's width; and the GLSL compiler's
#: binding (1.5 ms), which a load that compiles nothing never calls.
WARM_RUN_NEEDS_NONE_OF = (
    "uuid",
    "secrets",
    "difflib",
    "asyncvk.cache._remote_store",
    "shutil",
    "asyncvk.shader._compiler",
)


def test_a_warm_run_to_its_first_result_imports_nothing_only_a_save_or_error_needs(
    tmp_path: Path,
) -> None:
    model = MODELS / "squeezenet"
    files = [model / "model.param", model / "model.bin", tmp_path / "c.vkcache"]
    argv = [*map(str, files), str(model / "input.npy"), *WARM_RUN_NEEDS_NONE_OF]
    _fresh(WARM_RESULT, *argv)  # makes the cache file
    assert _fresh(WARM_RESULT, *argv) == "loaded []"
