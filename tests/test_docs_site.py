"""The documentation site builds with ``mkdocs build --strict`` (a broken link, a missing page, an
API block naming nothing or a docstring griffe cannot parse fails it), and its API page documents
every name ``asyncvk.__all__`` exports."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import asyncvk

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"

#: What the API page documents: every export but the version string.
EXPORTS = sorted(set(asyncvk.__all__) - {"__version__"})

#: The build's process and the folder it wrote the site to.
Build = tuple[subprocess.CompletedProcess[str], Path]

needs_mkdocs = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None,
    reason="mkdocs is not installed (pip install 'asyncvk-runtime[docs]')",
)


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory) -> Build:
    """The site, built once for this module's tests, the way it is published."""
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1")  # no banner about the theme's future
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=240,
    )
    return proc, out


@needs_mkdocs
def test_the_site_builds_strict(build: Build) -> None:
    proc, site = build
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}{proc.stderr}"
    for page in ("getting-started", "api", "cli", "server", "cache", "cache-format", "layers"):
        assert (site / page / "index.html").is_file(), page
    assert (site / "index.html").is_file()


@needs_mkdocs
def test_the_api_page_documents_every_export(build: Build) -> None:
    proc, site = build
    assert proc.returncode == 0, "the site did not build (test_the_site_builds_strict says why)"
    html = (site / "api" / "index.html").read_text(encoding="utf-8")
    anchors = set(re.findall(r'id="asyncvk\.([A-Za-z_][\w.]*)"', html))
    missing = [name for name in EXPORTS if name not in anchors]
    assert not missing, f"docs/api.md renders no entry for {missing}"
    for member in ("Net.load_param", "Net.load_model", "Extractor.extract", "Extractor.input"):
        assert member in anchors, member
    assert "PipelineCache.load_cache" in anchors and "PipelineCache.save_cache" in anchors


def test_api_md_has_a_block_for_every_export() -> None:
    """Without mkdocs too: a name added to ``__all__`` needs its ``::: asyncvk.NAME`` block."""
    blocks = re.findall(r"^::: asyncvk\.(\w+)\s*$", (DOCS / "api.md").read_text("utf-8"), re.M)
    assert sorted(blocks) == EXPORTS


def test_every_page_is_in_the_nav() -> None:
    config = (ROOT / "mkdocs.yml").read_text("utf-8")
    nav = set(re.findall(r"^\s+- [^:\n]+: ([\w./-]+\.md)\s*$", config, re.M))
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages == nav, f"pages not in mkdocs.yml's nav: {sorted(pages - nav)}"
