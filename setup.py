"""Only here for what pyproject.toml cannot express: ``cffi_modules``, shipping the
top-level ``shaders/`` folder inside the wheel as ``asyncvk/shaders``, compiling every
builtin shader to SPIR-V once the compiler's extension is built (``shader/_packaged``), and
tagging the wheel ``abi3``: cffi builds both extensions against the stable ABI, so one wheel
serves every CPython from 3.11 on (``tools/build-wheel.sh`` makes the one users install)."""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py


class BuildPyWithShaders(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "asyncvk" / "shaders"
        target.mkdir(parents=True, exist_ok=True)
        for source in sorted([*Path("shaders").glob("*.comp"), *Path("shaders").glob("*.h")]):
            (target / source.name).write_bytes(source.read_bytes())


class BuildExtWithSpirv(build_ext):
    """After the extensions, the packaged SPIR-V folder, beside the compiler's extension (in the
    checkout for an editable install). A failure costs only speed: shaders then compile at
    their first use, so it warns and the install goes on."""

    def run(self) -> None:
        super().run()
        extension = Path(self.get_ext_fullpath("asyncvk.shader._shaderc_cffi")).resolve()
        root = extension.parents[2]  # the folder holding asyncvk/
        folder = extension.parent / "packaged_spirv"
        # prepended: pip's isolated build puts its environment (cffi's backend) on PYTHONPATH
        path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
        env = dict(os.environ, PYTHONPATH=path)
        command = [sys.executable, "-m", "asyncvk.shader._packaged_build", str(folder)]
        done = subprocess.run(command, cwd=root, env=env, check=False)
        if done.returncode != 0:  # 3: some shaders left out (_packaged_build.LEFT_OUT)
            what = "left shaders out" if done.returncode == 3 else "was not built"
            print(
                f"warning: asyncvk's packaged SPIR-V {what}; those shaders will compile at "
                "their first use (python -m asyncvk.shader._packaged_build --check)",
                file=sys.stderr,
            )


setup(
    cffi_modules=[
        "asyncvk/shader/_shaderc_build.py:ffibuilder",
        "asyncvk/layers/_detect_build.py:ffibuilder",
    ],
    cmdclass={"build_py": BuildPyWithShaders, "build_ext": BuildExtWithSpirv},
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
