"""Only here for what pyproject.toml cannot express: ``cffi_modules``, and shipping the
top-level ``shaders/`` folder inside the wheel as ``asyncvk/shaders``."""

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithShaders(build_py):
    def run(self) -> None:
        super().run()
        target = Path(self.build_lib) / "asyncvk" / "shaders"
        target.mkdir(parents=True, exist_ok=True)
        for source in sorted([*Path("shaders").glob("*.comp"), *Path("shaders").glob("*.h")]):
            (target / source.name).write_bytes(source.read_bytes())


setup(
    cffi_modules=[
        "asyncvk/shader/_shaderc_build.py:ffibuilder",
        "asyncvk/layers/_detect_build.py:ffibuilder",
    ],
    cmdclass={"build_py": BuildPyWithShaders},
)
