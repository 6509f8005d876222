"""Build the packaged SPIR-V folder that ``_packaged`` reads: every builtin shader and shape
variant, for every option-bit combination a Net asks for.

setup.py's ``build_ext`` runs it once the compiler's extension is built (``python -m
asyncvk.shader._packaged_build FOLDER``); in a checkout, run it after editing a shader or the
option prelude, or the edited shaders compile at their first use (never a stale body: the file
names hash what is compiled). About 300 compiles: 3-4 s on one core. ``--check`` builds
nothing and names what the folder lacks: tools/install.sh runs it, since ``pip -q`` hides
setup.py's warning when the build fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .._errors import ShaderCompileError
from ._options import ShaderOptions
from ._packaged import (
    MANIFEST,
    PACKAGED_DIR,
    PACKAGED_OPTION_BITS,
    _parse_manifest,
    body_digest,
    file_name,
    manifest_text,
    uses_device_macros,
)
from ._registry import ShaderRegistry

#: The exit status of a build that compiled all but some shaders (a failed build exits 1 or 2).
LEFT_OUT = 3


def packaged_jobs(registry: ShaderRegistry) -> list[tuple[str, ShaderOptions]]:
    """Every (shader, options) the folder holds: shape variants included, device-macro
    shaders left out."""
    names = list(registry.names())
    names += [v for name in registry.names() if (v := registry.shape_variant(name)) is not None]
    return [
        (name, ShaderOptions.from_bits(bits))
        for bits in PACKAGED_OPTION_BITS
        for name in names
        if not uses_device_macros(registry.get(name).source)
    ]


def unbuilt(directory: Path, registry: ShaderRegistry) -> list[str]:
    """Each job the folder has no file for, as ``shader [bits N]``: not in its manifest (the
    build never ran or left it out, or the source was edited since: a file is named by what it
    compiles), or listed there and gone. Contents are checked at their use, not here."""
    parsed = _parse_manifest(directory / MANIFEST)
    listed = {} if parsed is None else parsed[1]
    missing = []
    for name, options in packaged_jobs(registry):
        file = file_name(name, options, registry.get(name).source)
        if file not in listed or not (directory / file).is_file():
            missing.append(f"{name} [bits {options.bits}]")
    return missing


def _ours(directory: Path) -> bool:
    """Whether a folder holds nothing but what a build writes (so replacing it loses nothing)."""
    return all(
        p.is_file() and (p.suffix == ".spv" or p.name == MANIFEST) for p in directory.iterdir()
    )


def build_packaged(directory: Path = PACKAGED_DIR, registry: ShaderRegistry | None = None) -> int:
    """Compile into a staging folder, then put it in ``directory``'s place; returns the number
    of files. A shader that fails to compile is left out (its first use reports the error) and
    the manifest says the folder is not complete. Refuses a ``directory`` that holds anything
    a build does not write."""
    from ._compiler import compile_builtin

    if directory.exists() and not (directory.is_dir() and _ours(directory)):
        raise FileExistsError(
            f"{directory} holds files a packaged SPIR-V build does not write: not replaced"
        )
    registry = registry or ShaderRegistry()
    jobs = packaged_jobs(registry)
    staging = directory.with_name(f"{directory.name}.building-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)

    def compile_one(job: tuple[str, ShaderOptions]) -> tuple[str, str] | None:
        name, options = job
        source = registry.get(name).source
        try:
            spirv = compile_builtin(name, source, options)
        except ShaderCompileError as exc:
            print(f"asyncvk: packaged SPIR-V: {name} [bits {options.bits}] left out: {exc}")
            return None
        path = file_name(name, options, source)
        (staging / path).write_bytes(spirv)
        return path, body_digest(spirv)

    try:
        with ThreadPoolExecutor(os.cpu_count() or 1) as pool:
            built = dict(d for d in pool.map(compile_one, jobs) if d is not None)
        (staging / MANIFEST).write_text(manifest_text(built, len(built) == len(jobs)), "ascii")
        retired = directory.with_name(f"{directory.name}.old-{os.getpid()}")
        if directory.exists():
            directory.rename(retired)
        staging.rename(directory)
        shutil.rmtree(retired, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return len(built)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m asyncvk.shader._packaged_build",
        description="Compile every builtin shader into the packaged SPIR-V folder.",
    )
    parser.add_argument("folder", nargs="?", type=Path, default=PACKAGED_DIR)
    parser.add_argument(
        "--check",
        action="store_true",
        help="build nothing; exit 1 naming the shaders the folder has no SPIR-V for",
    )
    parser.add_argument("--shaders", type=Path, default=None, help="shader sources (default: ours)")
    args = parser.parse_args(argv)
    registry = ShaderRegistry(args.shaders) if args.shaders else ShaderRegistry()
    jobs = len(packaged_jobs(registry))
    if args.check:
        missing = unbuilt(args.folder, registry)
        if missing:
            shown = ", ".join(missing[:4]) + (", ..." if len(missing) > 4 else "")
            print(
                f"asyncvk: packaged SPIR-V: {args.folder} lacks {len(missing)} of {jobs} "
                f"shader builds ({shown}): not built, removed, or edited since; those "
                "compile at their first use. Build them: python -m asyncvk.shader._packaged_build",
                file=sys.stderr,
            )
            return 1
        print(f"asyncvk: packaged SPIR-V: {args.folder} holds all {jobs} shader builds")
        return 0
    try:
        built = build_packaged(args.folder, registry)
    except FileExistsError as exc:
        print(f"asyncvk: packaged SPIR-V: {exc}", file=sys.stderr)
        return 2
    print(f"asyncvk: packaged SPIR-V: {built} shaders compiled into {args.folder}")
    if built < jobs:
        print(
            f"asyncvk: packaged SPIR-V: {jobs - built} of {jobs} left out (above); they compile "
            "at their first use",
            file=sys.stderr,
        )
        return LEFT_OUT
    return 0


if __name__ == "__main__":
    sys.exit(main())
