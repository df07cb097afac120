"""No reader notebook names a path only a clone of the repository has.

A reader runs a chapter from the wheel (Colab, Binder, a downloaded notebook): there is no ``data/``,
``benchmarks/`` or ``scripts/`` folder, no Makefile and no CONTRIBUTING. The chapters say what the reader's
environment has instead: the data folder ``mmtoken.config.data_dir()``, the module of the package, the command to
run, or a link to the file in the repository. This scans every MyST notebook of the book (its prose and its code,
both in the reader notebook), line breaks joined, for the kinds of repository-only names below.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted(
    p for p in (ROOT / "book").rglob("*.md") if p.read_text(encoding="utf-8").startswith("---\njupytext:")
)
TARGETS = sorted(set(re.findall(r"^([a-z][\w-]*):", (ROOT / "Makefile").read_text(encoding="utf-8"), re.M)))
FOLDERS = ("data", "benchmarks", "scripts", "tests", "_build", "binder", "requirements", ".venv")

# kind of name -> pattern; a path inside a link's address (github.com/.../blob/main/benchmarks/x.py) is fine
_FOLDERS = "|".join(map(re.escape, FOLDERS))
_TARGETS = "|".join(map(re.escape, TARGETS))
REPOSITORY_ONLY = {
    "a folder of the checkout": re.compile(rf"(?<![\w/.~-])(?:{_FOLDERS})/"),
    "a make target": re.compile(rf"`[^`]*\bmake\s+(?:{_TARGETS})\b[^`]*`"),
    "a file of the checkout": re.compile(r"\b(?:CONTRIBUTING|Makefile)\b"),
}

# (notebook, text around the name, why it stays)
KNOWN = [
    (
        "book/part1/09_vit_sparsity.md",
        '# Stored outputs hold on any machine (CONTRIBUTING, "Stored outputs that hold on any machine")',
        "a comment of an exported cell of chapter 9: an edit changes the module its carried run is fingerprinted by",
    ),
]


def repository_names(text: str) -> list[tuple[str, int, str]]:
    """``(kind, line, the sentence around it)`` for each repository-only name in ``text``."""
    out = []
    for kind, rx in REPOSITORY_ONLY.items():
        for m in rx.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            start = text.rfind("\n", 0, m.start()) + 1
            end = text.find("\n", m.end())
            out.append((kind, line, text[start : end if end >= 0 else len(text)].strip()))
    return out


def test_the_scan_finds_each_kind_and_passes_what_a_reader_has():
    for text in (
        "cached under `data/vit/`",
        "writes\n`benchmarks/results/`",
        "(`python scripts/export_chapters.py`)",
        "run `make\nbench`",
        "see CONTRIBUTING, section X",
        "the Makefile's target",
    ):
        assert repository_names(text), text
    for text in (
        "in the data folder (`mmtoken.config.data_dir()`)",
        "[run_all.py](https://github.com/mmtoken/mmtoken/blob/main/benchmarks/run_all.py)",
        "`python -m mmtoken claims --only A.global`",
        "to make the difference visible; make book-keeping easy",
        "the module `mmtoken.chapters.ch02_global` of the package",
    ):
        assert not repository_names(text), text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_reader_notebook_names_a_repository_only_path(path):
    rel = path.relative_to(ROOT).as_posix()
    known = [around for nb, around, _ in KNOWN if nb == rel]
    found = [
        f"line {line} ({kind}): {sentence[:120]}"
        for kind, line, sentence in repository_names(path.read_text(encoding="utf-8"))
        if not any(k in sentence for k in known)
    ]
    assert not found, f"{rel} names what only a clone has; say what the reader's environment has:\n" + "\n".join(found)


def test_every_known_exception_is_still_there():
    for nb, around, why in KNOWN:
        assert around in (ROOT / nb).read_text(encoding="utf-8"), f"{nb}: {why} is gone; drop it from KNOWN"


def chapter_numbers(text: str) -> set[int]:
    """``8, 9, 12 and 14 to 17`` -> {8, 9, 12, 14, 15, 16, 17}."""
    out: set[int] = set()
    for a, b in re.findall(r"(\d+)(?:\s+to\s+(\d+))?", text):
        out |= set(range(int(a), int(b or a) + 1))
    return out


def test_the_running_page_lists_every_chapter_with_a_gpu_note():
    noted = {
        int(p.name[:2])
        for p in ROOT.glob("book/part*/[0-9][0-9]_*.md")
        if "_snippets/gpu.md" in (text := p.read_text(encoding="utf-8")) or "Faster on a GPU" in text
    }
    running = " ".join((ROOT / "book" / "running.md").read_text(encoding="utf-8").split())
    listed = re.search(r'"Faster on a GPU" note: chapters ([\d, toand]+)\)', running)
    assert listed, "book/running.md no longer lists the chapters with a GPU note"
    assert chapter_numbers(listed.group(1)) == noted
    assert chapter_numbers("8, 9, 12 and 14 to 17") == {8, 9, 12, 14, 15, 16, 17}


def test_the_wheel_workflow_names_the_chapters_the_wheel_test_runs():
    chapters = re.search(r"^CHAPTERS = \[(.*?)\]", (ROOT / "tests" / "test_from_wheel.py").read_text(), re.S | re.M)
    numbers = {int(n) for n in re.findall(r'"book/part\d/(\d\d)_', chapters.group(1))}
    comment = " ".join(
        line.lstrip("# ") for line in (ROOT / ".github" / "workflows" / "wheel.yml").read_text().splitlines()[:10]
    )
    said = re.search(r"executes the tour, chapters ([\d, and]+?) and the", comment)
    assert said and chapter_numbers(said.group(1)) == numbers, (said and said.group(1), numbers)
