"""Code fingerprints that cover a computation, not the modules around it.

A result (a recorded claim, an experiment's cached arrays) is valid while the code that computed it is
unchanged. That code is found statically, from the source (:mod:`ast`), at the level of **module-level
definitions** (a function, a class with its methods, an assignment) with every module-level name each
references, followed transitively across the ``mmtoken`` modules: a bare name resolves to its definition in
the same module or to what an ``import`` binds it to (imports inside functions included, re-exports
followed); an attribute of an imported module (``train.gd``) to that module's definition; a module used as
a value (``getattr(train, name)``) or a star import brings in all of that module. Left out by design
(:data:`OUTSIDE`): code that stores, fetches or draws a result, which does not change it. Names found by a
string are not followed; the package's computations do not do that.
A definition counts by its code alone (:func:`code_text`): a reworded docstring, a comment or a line
break leaves every result valid.

:func:`of` gives the digest of the closure of some roots (``(module, name)`` pairs, :func:`roots_of`),
with the versions of NumPy and torch; :class:`Index` does the same for a copy of the package elsewhere
(the tests edit a scratch copy and compare).
"""

from __future__ import annotations

__all__ = [
    "PACKAGE",
    "PACKAGE_DIR",
    "OUTSIDE",
    "WHOLE",
    "Module",
    "Index",
    "versions",
    "index",
    "roots_of",
    "changes",
    "is_book_code",
    "of",
    "code_text",
]

import ast
import copy
import functools
import hashlib
import inspect
import re
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from mmtoken.book import edits

PACKAGE = "mmtoken"
PACKAGE_DIR = Path(__file__).resolve().parents[1]

OUTSIDE = frozenset(
    {
        "mmtoken.book.plotting",  # draws results, computes none
        "mmtoken.book.resultcache",  # stores and validates results (its format has a version of its own)
        "mmtoken.book.fingerprint",  # this module: how results are keyed, not what they are
        "mmtoken.book.edits",  # how a process's code is compared with the source: keying, not computing
        "mmtoken.workers",  # which process computes a result, not what it is
        "mmtoken.datasets.download",  # fetches files, verified by their SHA-256 (the data's own key)
    }
)
"""Modules whose definitions never enter a fingerprint."""

_CHAPTER = re.compile(r'^CHAPTER = "([^"]+)"$', re.MULTILINE)
WHOLE = "*"
"""The name standing for every definition of a module (a module used as a value, a star import)."""

Node = tuple[str, str]
"""``(module, name)``: a module-level definition."""


@dataclass
class Module:
    """What one module defines (name -> source and the nodes it references) and what it imports."""

    defs: dict[str, str] = field(default_factory=dict)
    refs: dict[str, set[Node]] = field(default_factory=dict)
    binds: dict[str, Node] = field(default_factory=dict)  # alias -> (module, "") or (module, name)


class Index:
    """The definitions of the package at ``root`` (default: this package), parsed on demand."""

    def __init__(self, root: str | Path = PACKAGE_DIR):
        self.root = Path(root)
        self._modules: dict[str, Module] = {}
        self._files: dict[str, Path | None] = {}
        self._digests: dict[tuple[Node, ...], str] = {}
        self._closures: dict[tuple[Node, ...], list[Node]] = {}
        self._chapters: dict[str, str] | None = None

    # ------------------------------------------------------------------ files and modules
    def file(self, name: str) -> Path | None:
        """The source file of module ``name`` (``mmtoken.x.y``), or ``None``."""
        if name not in self._files:
            self._files[name] = None
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                base = self.root.joinpath(*name.split(".")[1:])
                for path in (base.with_suffix(".py"), base / "__init__.py"):
                    if path.is_file():
                        self._files[name] = path
                        break
        return self._files[name]

    def module(self, name: str) -> Module:
        if name not in self._modules:
            self._modules[name] = self._parse(name)
        return self._modules[name]

    def _parse(self, name: str) -> Module:
        path = self.file(name)
        if path is None:
            raise ValueError(f"{name!r} is not a module of the {PACKAGE} package")
        text = path.read_text(encoding="utf-8")
        tree = _without_docstrings(ast.parse(text, str(path)))  # in place: each statement's code_text, uncopied
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        mod = Module()
        for stmt in tree.body:
            _bind_imports(self, stmt, package, mod.binds)
        for stmt in tree.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Pass)) or _is_main_guard(stmt):  # Pass: a docstring
                continue
            source = ast.unparse(stmt)  # = code_text(stmt): the docstrings are gone already
            local = dict(mod.binds)
            for sub in ast.walk(stmt):  # imports inside functions bind names there
                _bind_imports(self, sub, package, local)
            refs = _references(self, stmt, name, local)
            for target in _defined_names(stmt) or [""]:  # "": a statement run at import (a call)
                mod.defs[target] = mod.defs.get(target, "") + source + "\n"
                mod.refs.setdefault(target, set()).update(refs)
        for target, refs in mod.refs.items():  # a bare name of this module that it does not define is a local
            mod.refs[target] = {n for n in refs if n[0] != name or n[1] in mod.defs or n[1] in ("", WHOLE)}
        return mod

    # ------------------------------------------------------------------ the chapters' modules
    def chapter_module(self, chapter: object) -> str | None:
        """The generated module (``mmtoken.chapters.ch02_global``) whose ``CHAPTER`` constant is ``chapter``
        (``"02_global"``), read from the files under ``chapters/`` (nothing is imported); ``None`` if none."""
        if self._chapters is None:
            self._chapters = {}
            for path in sorted((self.root / "chapters").glob("*.py")):
                if m := _CHAPTER.search(path.read_text(encoding="utf-8")):
                    self._chapters[m.group(1)] = f"{PACKAGE}.chapters.{path.stem}"
        return self._chapters.get(chapter) if isinstance(chapter, str) else None

    # ------------------------------------------------------------------ the closure
    def resolve(self, node: Node, seen: frozenset[Node] = frozenset()) -> set[Node]:
        """The definitions ``node`` stands for (an import followed to the module defining the name)."""
        module, name = node
        if module in OUTSIDE or self.file(module) is None:
            return set()
        if name in ("", WHOLE):
            return {(module, name)}
        mod = self.module(module)
        if name in mod.defs:
            return {node}
        if name in mod.binds and node not in seen:  # a re-export: follow it
            return self.resolve(mod.binds[name], seen | {node})
        sub = f"{module}.{name}"
        if self.file(sub) is not None:  # `package.submodule` used as a value
            return {(sub, WHOLE)}
        return {(module, WHOLE)}  # not found statically: the whole module, to be safe

    def closure(self, roots: Iterable[Node]) -> list[Node]:
        """Every definition the ``roots`` reference, transitively, with the import-time statements of
        each module they live in and of its packages; sorted (computed once per set of roots)."""
        key = tuple(sorted(set(roots)))
        if key not in self._closures:
            self._closures[key] = self._closure(key)
        return self._closures[key]

    def _closure(self, roots: tuple[Node, ...]) -> list[Node]:
        todo = [n for r in roots for n in self.resolve(r)]
        seen: set[Node] = set()
        while todo:
            node = todo.pop()
            if node in seen:
                continue
            seen.add(node)
            module, name = node
            mod = self.module(module)
            if name == WHOLE:
                nxt = {(module, n) for n in mod.defs}
            else:
                nxt = set(mod.refs.get(name, ()))
                parts = module.split(".")
                nxt.update((".".join(parts[:k]), "") for k in range(1, len(parts) + 1))
            for n in nxt:
                todo.extend(self.resolve(n))
        return sorted(n for n in seen if n[1] == WHOLE or n[1] in self.module(n[0]).defs)

    def digest(self, roots: Iterable[Node]) -> str:
        """SHA-256 of the source of :meth:`closure` of ``roots`` and of the numerical libraries' versions
        (the sources are read once per index: edit a copy, then make a new :class:`Index`)."""
        key = tuple(sorted(set(roots)))
        if key not in self._digests:
            h = hashlib.sha256()
            for module, name in self.closure(key):
                if name == WHOLE:
                    continue  # its definitions are in the closure one by one
                h.update(f"{module}:{name}\0".encode() + self.module(module).defs[name].encode() + b"\0")
            h.update(versions().encode())
            self._digests[key] = h.hexdigest()
        return self._digests[key]


def code_text(node: ast.AST | str) -> str:
    """The code of a statement (or of a source text) without its docstrings, comments and layout: what
    a fingerprint hashes, so that rewording a docstring or reflowing a line leaves every result valid.

    Every bare string statement is dropped (docstrings, attribute docstrings); :func:`ast.unparse` of what
    is left is the same for any two sources that differ only in comments, line breaks or quotes.
    """
    return ast.unparse(_without_docstrings(ast.parse(node) if isinstance(node, str) else copy.deepcopy(node)))


def _without_docstrings(tree: ast.AST) -> ast.AST:
    """``tree`` with every bare string statement removed from every body (in place; an emptied body gets a
    ``pass``), returned."""
    for sub in ast.walk(tree):
        body = getattr(sub, "body", None)
        if isinstance(body, list) and body and all(isinstance(s, ast.stmt) for s in body):
            sub.body = [s for s in body if not _is_docstring(s)] or [ast.Pass()]
    return tree


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _is_main_guard(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.If) and "__main__" in ast.dump(stmt.test)


def _defined_names(stmt: ast.stmt) -> list[str]:
    """The module-level names a top-level statement defines."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [stmt.name]
    out: list[str] = []
    for node in ast.walk(stmt):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.append(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.append(node.id)
    return sorted(set(out))


def _bind_imports(index: Index, stmt: ast.AST, package: str, binds: dict[str, Node]) -> None:
    """Record in ``binds`` what an import statement binds each of its names to (``mmtoken`` only)."""
    if isinstance(stmt, ast.Import):
        for a in stmt.names:
            if a.asname:
                binds[a.asname] = (a.name, "")
            else:  # `import mmtoken.x` binds `mmtoken`
                binds[a.name.split(".")[0]] = (a.name.split(".")[0], "")
    elif isinstance(stmt, ast.ImportFrom):
        if stmt.level:
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - stmt.level + 1])
            target = f"{base}.{stmt.module}" if stmt.module else base
        else:
            target = stmt.module or ""
        for a in stmt.names:
            if a.name == "*":
                binds[f"*{target}"] = (target, WHOLE)
                continue
            sub = f"{target}.{a.name}"
            binds[a.asname or a.name] = (sub, "") if index.file(sub) is not None else (target, a.name)


def _references(index: Index, stmt: ast.stmt, module: str, binds: dict[str, Node]) -> set[Node]:
    """The nodes the names in ``stmt`` refer to: same-module names, imported names, module attributes."""
    out: set[Node] = {n for k, n in binds.items() if k.startswith("*")}
    chained: set[int] = set()
    for node in ast.walk(stmt):
        if isinstance(node, ast.Attribute) and id(node) not in chained:
            chain, base = [], node
            while isinstance(base, ast.Attribute):
                chained.add(id(base))
                chain.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in binds and binds[base.id][1] == "":
                chained.add(id(base))
                target = binds[base.id][0]
                for attr in reversed(chain):
                    if index.file(f"{target}.{attr}") is not None:
                        target = f"{target}.{attr}"
                        continue
                    out.add((target, attr))
                    break
                else:
                    out.add((target, WHOLE))
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and id(node) not in chained:
            if node.id in binds:
                target, name = binds[node.id]
                out.add((target, name or WHOLE))  # a module used as a value: all of it
            else:
                out.add((module, node.id))  # kept only if the module defines it (see Index.resolve)
    return {n for n in out if index.file(n[0]) is not None}


@functools.lru_cache(maxsize=1)
def versions() -> str:
    """The versions of the numerical libraries (from the installed metadata: nothing is imported)."""
    from importlib import metadata

    import numpy as np

    out = [f"numpy {np.__version__}"]
    for dist in ("torch", "numba"):
        try:
            out.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            out.append(f"{dist} absent")
    return " ".join(out)


# --------------------------------------------------------------------------- the package's own index
@functools.lru_cache(maxsize=1)
def index() -> Index:
    """The index of this package (parsed once per process)."""
    return Index()


def roots_of(func: Callable) -> list[Node]:
    """The definition ``func`` (unwrapped) lives in: itself at module level, the module-level function whose
    body defines it (``f.<locals>.g`` -> ``f``), or its whole module for a module-level lambda. Code run in a
    chapter's notebook (``__main__``, with the chapter's ``CHAPTER`` constant) lives in the chapter's generated
    module (:meth:`Index.chapter_module`); other ``__main__`` code in no module (``[]``)."""
    func = inspect.unwrap(func)
    module = func.__module__
    if module == "__main__":
        module = index().chapter_module(func.__globals__.get("CHAPTER"))
        if module is None:
            return []
    top = func.__qualname__.split(".")[0]
    return [(module, WHOLE if top == "<lambda>" else top)]


def changes(*funcs: Callable, extra: Iterable[Node] = ()) -> str | None:
    """A digest of what the computation of ``funcs`` ran that is not the package's source, or ``None``.

    The fingerprint (:meth:`Index.digest`) hashes the source files; this compares each definition of the closure
    (:meth:`Index.closure`) with what the process holds under its name: a function or class compiled to the same
    code (code object against code object, :func:`mmtoken.book.edits.code_digest`, never a cell's text), a literal constant with the
    same ``repr``. For code run in a chapter's notebook (``__main__``) the chapter module's names are read from the
    notebook. A cell the reader edited and ran, a function redefined or a constant rebound in a cell of their own,
    a module constant set from outside (``ch.GD_MIN_CORR = 0.9``) each make a digest; the unmodified book gives
    ``None``. Code of a notebook outside the chapters is a digest of its functions' code."""
    idx = index()
    out: set[str] = set()
    for func in (inspect.unwrap(f) for f in funcs):
        ns, chapter = func.__globals__, None
        if func.__module__ == "__main__":
            chapter = idx.chapter_module(ns.get("CHAPTER"))
            if chapter is None:  # a notebook of the reader's own: its code is what it is
                out.add(f"{func.__qualname__}:{edits.code_digest(func.__code__)}")
                continue
        nodes = idx.closure(roots_of(func) + list(extra))
        for mod in sorted({m for m, _ in nodes}):
            held = ns if mod == chapter else getattr(sys.modules.get(mod), "__dict__", None)
            if held is not None:
                out.update(f"{mod}:{alias}:rebound" for alias in edits.rebound(idx.module(mod).binds, held))
        for mod, name in nodes:
            held = ns if mod == chapter else getattr(sys.modules.get(mod), "__dict__", None)
            if (
                name not in ("", WHOLE)
                and held is not None
                and not edits.same_as_source(idx.file(mod), mod, name, held)
            ):
                out.add(f"{mod}:{name}:{edits.runtime_digest(held.get(name))}")
    return hashlib.sha256("\0".join(sorted(out)).encode()).hexdigest()[:16] if out else None


def is_book_code(func: Callable) -> bool:
    """Whether ``func`` is the book's own code: of a package module, or of a chapter's notebook, and everything it
    reaches as the package's source says (:func:`changes`); not a test's function, nor a reader's edit."""
    func = inspect.unwrap(func)
    module = func.__module__
    if module != "__main__" and index().file(module) is None:
        return False
    return bool(roots_of(func)) and changes(func) is None


def of(*funcs: Callable, extra: Iterable[Node] = ()) -> str:
    """Code fingerprint of the computation of ``funcs`` (:func:`roots_of` each) and ``extra`` nodes; notebook code
    that is not its chapter's module adds the digest of what it ran (:func:`changes`), so an edited cell gets a
    result of its own and the unmodified notebook shares the module's."""
    roots = [r for f in funcs for r in roots_of(f)] + list(extra)
    digest = index().digest(roots)
    changed = changes(*funcs, extra=extra)
    if changed is not None:
        digest = hashlib.sha256(f"{digest}\0{changed}".encode()).hexdigest()
    return digest
