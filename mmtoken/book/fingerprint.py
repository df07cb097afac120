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
    "outside_key",
    "of",
    "code_text",
]

import ast
import copy
import functools
import hashlib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "mmtoken"
PACKAGE_DIR = Path(__file__).resolve().parents[1]

OUTSIDE = frozenset(
    {
        "mmtoken.book.plotting",  # draws results, computes none
        "mmtoken.book.resultcache",  # stores and validates results (its format has a version of its own)
        "mmtoken.book.fingerprint",  # this module: how results are keyed, not what they are
        "mmtoken.datasets.download",  # fetches files, verified by their SHA-256 (the data's own key)
    }
)
"""Modules whose definitions never enter a fingerprint."""

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
        each module they live in and of its packages; sorted."""
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
    body defines it (``f.<locals>.g`` -> ``f``), or its whole module for a module-level lambda. A chapter
    notebook's code lives in its generated module (:func:`mmtoken.chapters.notebook_home`): in all of it if
    the reader edited it, in none outside the chapters (:func:`outside_key` tells such code apart)."""
    from mmtoken.chapters import home_of

    func = inspect.unwrap(func)
    module = func.__module__
    home = home_of(func)
    if home is not None:
        if home.module is None:
            return []
        if home.changed is not None:
            return [(home.module, WHOLE)]
        module = home.module
    top = func.__qualname__.split(".")[0]
    return [(module, WHOLE if top == "<lambda>" else top)]


def outside_key(func: Callable) -> str | None:
    """For code run in a notebook that is not a generated module's (a cell the reader edited, or a
    notebook outside the chapters): a digest of what the kernel ran; ``None`` for the package's code."""
    from mmtoken.chapters import home_of

    home = home_of(func)
    return None if home is None else home.changed


def of(*funcs: Callable, extra: Iterable[Node] = ()) -> str:
    """Code fingerprint of the computation of ``funcs`` (:func:`roots_of` each) and ``extra`` nodes,
    and of the notebook code among them that is no module's (:func:`outside_key`)."""
    roots = [r for f in funcs for r in roots_of(f)] + list(extra)
    digest = index().digest(roots)
    outside = sorted({k for k in map(outside_key, funcs) if k is not None})
    if outside:
        digest = hashlib.sha256(f"{digest}\0{'/'.join(outside)}".encode()).hexdigest()
    return digest
