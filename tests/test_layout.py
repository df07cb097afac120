"""The package's layout: by topic, small modules, no import cycle (issue 24).

A reader finds a primitive in its topic's subpackage (``mmtoken.attention``,
``mmtoken.embeddings``, ...); the generated chapter modules are the book's and
exempt from the size rule (nbdev writes them from the chapters).
"""

import ast
import pydoc
from pathlib import Path

import pytest

import mmtoken

PACKAGE = Path(mmtoken.__file__).resolve().parent
TOP_LEVEL = {"__init__", "__main__", "config", "validate", "rules", "workers"}  # set-up shared by every topic
MAX_LINES = 500


def hand_written() -> list[Path]:
    """Every module of the package except the generated chapter modules."""
    return sorted(
        p for p in PACKAGE.rglob("*.py") if not (p.parent.name == "chapters" and p.name.startswith(("ch", "app_")))
    )


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_hand_written_module_is_over_500_lines():
    long = {
        module_name(p): n for p in hand_written() if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"modules over {MAX_LINES} lines (split them by idea): {long}"


def test_every_module_lives_in_a_topic():
    loose = [p.stem for p in PACKAGE.glob("*.py") if p.stem not in TOP_LEVEL]
    assert not loose, f"modules outside a topic subpackage: {loose} (move them into {mmtoken.TOPICS})"
    for topic in mmtoken.TOPICS:
        assert (PACKAGE / topic / "__init__.py").is_file(), topic


def module_imports(path: Path) -> set[str]:
    """The mmtoken modules that ``path`` imports at module level (imports inside functions are lazy)."""
    out = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("mmtoken"):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                out.add(full if (PACKAGE.parent / Path(*full.split("."))).with_suffix(".py").is_file() else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("mmtoken")}
    return out


def test_no_import_cycle():
    graph = {module_name(p): module_imports(p) for p in PACKAGE.rglob("*.py")}
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                pytest.fail("import cycle: " + " -> ".join(path[path.index(n) :] + [n]) if n in path else n)
            if n in graph and state.get(n) is None:
                visit(n, path + [n])
        state[m] = 2

    for m in sorted(graph):
        if state.get(m) is None:
            visit(m, [m])


def test_no_import_climbs_from_the_library_into_the_chapters():
    """Issue 42: the library (every topic, the store, the ledger) never imports the generated chapter modules, not
    even inside a function; the chapters import the library, and the command line (``__main__``) imports both."""
    for path in hand_written():
        if path.parent.name == "chapters" or path.name == "__main__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, (ast.Import, ast.ImportFrom)) else []
            target = node.module or "" if isinstance(node, ast.ImportFrom) else ""
            climbs = target.startswith("mmtoken.chapters") or any(n.startswith("mmtoken.chapters") for n in names)
            climbs |= target == "mmtoken" and "chapters" in names
            assert not climbs, f"{module_name(path)} imports the chapters (line {node.lineno})"


def test_help_mmtoken_names_every_topic():
    text = pydoc.render_doc(mmtoken, renderer=pydoc.plaintext)
    for topic in mmtoken.TOPICS:
        assert f"mmtoken.{topic}" in text, topic
    assert mmtoken.attention.__name__ == "mmtoken.attention"  # a topic without importing it first
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        mmtoken.nothing  # noqa: B018


def private_uses(path: Path) -> list[str]:
    """Private names (a leading underscore; dunders are not private) of other mmtoken modules that ``path`` uses:
    imported from an mmtoken module, or read as an attribute of an imported mmtoken module."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    modules, found = set(), []
    private = lambda name: name.startswith("_") and not name.startswith("__")  # noqa: E731
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("mmtoken"):
            found += [f"{node.module}.{a.name}" for a in node.names if private(a.name)]
            modules |= {a.asname or a.name for a in node.names if module_exists(f"{node.module}.{a.name}")}
        elif isinstance(node, ast.Import):
            modules |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("mmtoken")}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr) and isinstance(node.value, ast.Name):
            if node.value.id in modules:
                found.append(f"{node.value.id}.{node.attr}")
    return found


def module_exists(full: str) -> bool:
    path = PACKAGE.parent / Path(*full.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_no_private_name_crosses_modules(tmp_path):
    """Public seams only: a module (hand-written or generated) uses no other mmtoken module's ``_name``; the check
    finds both ways of reaching one (the nearest wrong layouts)."""
    wrong = tmp_path / "wrong.py"
    u = "_"  # the fixture's private names, spelled so that this file itself does not read as a crossing
    wrong.write_text(
        f"from mmtoken.book.ledger import {u}x, Result\nfrom mmtoken.book import ledger\nledger.{u}y(ledger.__name__)\n"
    )
    assert private_uses(wrong) == ["mmtoken.book.ledger._x", "ledger._y"]
    crossing = {module_name(p): uses for p in PACKAGE.rglob("*.py") if (uses := private_uses(p))}
    assert not crossing, f"private names used across modules (make them public or keep them home): {crossing}"
