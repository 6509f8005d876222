"""The product speaks of the product alone, and its README reads in two minutes.

Every text file the project ships or keeps (code, tests, docs, benchmark results) is searched
for traces of how it was made: numbered rounds of work, borrowed machines, paths of one
machine. A user reading a figure must find what was measured, where and when, never a story.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: Folders that are built or installed, never written by hand.
SKIPPED_DIRS = frozenset(
    ".git .venv build dist site __pycache__ packaged_spirv".split()
    + ".pytest_cache .ruff_cache .mypy_cache".split()
)
TEXT_SUFFIXES = frozenset(
    [*".py .md .sh .json .jsonl .txt .toml .yml .yaml .cfg .in .c .h .comp .param".split(), ""]
)

#: What a history of the work looks like, as opposed to a description of the product.
HISTORY = {
    "a numbered round of work": re.compile(r"\b(session|round|sprint)s?[ _-]?\d", re.I),
    "an issue number of the tracker": re.compile(r"\bissues? #?\d", re.I),
    "a borrowed machine": re.compile(r"\b(loans?|borrowed machines?)\b", re.I),
    "a path of one machine": re.compile(r"(?<![\w.])/(home/\w+/|root/\.|tmp/tmp)"),
}
#: In a results file, any absolute path: a figure names its model and device, not a folder.
ABSOLUTE_PATH = re.compile(r'"/[^"]*"')


def shipped_text_files() -> list[Path]:
    files = []
    for path in sorted(ROOT.rglob("*")):
        parts = set(path.relative_to(ROOT).parts)
        built = parts & SKIPPED_DIRS or any(part.endswith(".egg-info") for part in parts)
        if built or not path.is_file() or path.suffix not in TEXT_SUFFIXES:
            continue
        if path.name.startswith(".") and path.suffix == "":
            continue
        files.append(path)
    return files


def test_no_file_tells_how_it_was_made() -> None:
    found = []
    for path in shipped_text_files():
        if path == Path(__file__).resolve():
            continue
        name = str(path.relative_to(ROOT))
        for what, pattern in HISTORY.items():
            if pattern.search(name):
                found.append(f"{name}: its name holds {what}")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        results = path.parts[-3:-1] == ("benchmarks", "results")
        for number, line in enumerate(text.splitlines(), 1):
            for what, pattern in HISTORY.items():
                if pattern.search(line):
                    found.append(f"{name}:{number}: {what}: {line.strip()[:100]}")
            if results and ABSOLUTE_PATH.search(line):
                found.append(f"{name}:{number}: an absolute path: {line.strip()[:100]}")
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "line",
    [
        "measured in round 4 of the work",
        "see results/sprint2/latency.json",
        "the borrowed machine was slow",
        "written to /home/alice/out.json",
        "python at /root/.local/bin/python3",
        "model at /tmp/tmpab12cd/model.param",
        "fixed in issue 12",
    ],
)
def test_the_search_finds_history(line: str) -> None:
    assert any(pattern.search(line) for pattern in HISTORY.values())


@pytest.mark.parametrize(
    "line",
    [
        "plans lent to one extraction at a time",
        "a session of the server (one connection)",
        "the model reads /tmp/model.param",
        "the root's home, /root/asyncvk",
        "rounded to fp16",
    ],
)
def test_the_search_leaves_product_words_alone(line: str) -> None:
    assert not any(pattern.search(line) for pattern in HISTORY.values())


def readme_paragraphs(text: str) -> list[str]:
    """The README's prose paragraphs: blank-line separated, outside code fences and tables."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    blocks = [block.strip() for block in text.split("\n\n")]
    return [b for b in blocks if b and not b.startswith(("#", "|", "!["))]


def test_readme_says_what_it_is_before_any_command() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    before_code = text.split("```", 1)[0]
    assert "ncnn" in before_code and "Vulkan" in before_code
    assert len(re.findall(r"^```sh\s*$", text, flags=re.M)) == 2, "exactly two ```sh commands"
    assert "pip install asyncvk-runtime" in text


def test_readme_paragraphs_are_short() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    long = [p[:60] for p in readme_paragraphs(text) if len(p.split()) > 150]
    assert not long, f"paragraphs over 150 words: {long}"


def test_readme_links_resolve() -> None:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(((?!https?:)[^)#]+)\)", text)
    assert targets
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README links to missing files: {missing}"
