"""Whether the code a process runs is the package's source: a reader's edits, seen by comparing code objects.

The fingerprint of a result (:mod:`mmtoken.book.fingerprint`) hashes the package's source files. What a process
runs may differ: a notebook's cell edited and run, a function redefined or a constant rebound in a cell of the
reader's own, a module constant set from outside (``ch.GD_MIN_CORR = 0.9``), an import rebound. This module
compares what the process holds under each name with what the source defines: functions and classes by their
compiled code (:func:`code_digest`: bytecode, names and constants, not file names or line numbers, so a notebook
cell and the module nbdev exported it to compare equal), constants by their literal value. It reads no cell text
and no IPython history.
"""

from __future__ import annotations

__all__ = ["same_as_source", "rebound", "code_digest", "runtime_digest", "literal", "class_literals"]

import ast
import functools
import hashlib
import inspect
import re
import sys
import types
from pathlib import Path

_CELL = re.compile(r"^# %% .*$", re.MULTILINE)  # a cell's first line in a generated module (nbdev)


@functools.lru_cache(maxsize=256)
def _compiled(path: Path, mtime_ns: int, cells: bool) -> tuple[dict[str, types.CodeType], dict[str, object]]:
    """The module's source compiled (not run): the code object of each top-level ``def`` and ``class`` by
    name, and each constant assigned a literal value (:func:`ast.literal_eval`) by name, but the module's state
    (names its functions declare ``global``). ``cells``: each of a
    generated module's cells (``# %% ...`` to the next) compiled on its own, as a notebook compiles it (a
    call on a module imported in another cell compiles to other bytecode than one imported above it)."""
    text = path.read_text(encoding="utf-8")
    units = _CELL.split(text) if cells else [text]
    defs: dict[str, types.CodeType] = {}
    for unit in units:
        code = compile(unit, str(path), "exec", dont_inherit=True)
        defs.update((c.co_name, c) for c in code.co_consts if isinstance(c, types.CodeType))
    literals: dict[str, object] = {}
    tree = ast.parse(text)
    state = {n for node in ast.walk(tree) if isinstance(node, ast.Global) for n in node.names}
    for stmt in tree.body:
        target = stmt.targets[0] if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 else None
        target = stmt.target if isinstance(stmt, ast.AnnAssign) and stmt.value is not None else target
        if isinstance(target, ast.Name):
            try:
                literals[target.id] = ast.literal_eval(stmt.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                literals.pop(target.id, None)  # not a literal: not compared
    for name in state:  # a variable the module's functions reassign (``global``) is state, not code
        literals.pop(name, None)
    return defs, literals


def same_as_source(path: Path, module: str, name: str, namespace: dict) -> bool:
    """Whether ``namespace[name]`` (a notebook's, or the loaded module's) is what ``module``'s source defines: a
    function compiled to the same code, a class with the same methods and literal attributes, a constant
    equal to the module's literal (same ``repr``). A name the notebook lacks, or a non-literal constant, is
    not compared (``True``)."""
    if name not in namespace:
        return True
    value = namespace[name]
    defs, literals = _compiled(path, path.stat().st_mtime_ns, namespace.get("__name__") == "__main__")
    if name in literals and literal(literals[name]):
        return repr(value) == repr(literals[name])
    body = defs.get(name)
    if body is None:
        return True
    value = inspect.unwrap(value) if callable(value) else value
    if getattr(value, "__module__", None) not in ("__main__", module):
        return False  # the module defines it; the process holds something else under that name
    if isinstance(value, types.FunctionType):
        return code_digest(value.__code__) == code_digest(body)
    if isinstance(value, type):
        methods = {c.co_name: code_digest(c) for c in body.co_consts if isinstance(c, types.CodeType)}
        runtime = {}
        for k, v in vars(value).items():
            f = getattr(v, "__func__", getattr(v, "fget", v))
            f = inspect.unwrap(f) if callable(f) else f
            if isinstance(f, types.FunctionType):
                runtime[k] = code_digest(f.__code__)
        attrs = vars(value)
        return all(runtime.get(k) == d for k, d in methods.items() if not k.startswith("<")) and all(
            k in attrs and repr(attrs[k]) == text for k, text in class_literals(body) if not k.startswith("__")
        )
    return False


def rebound(binds: dict[str, tuple[str, str]], namespace: dict) -> list[str]:
    """The names ``module`` imports from the package (``from mmtoken.attention import svm``) that
    ``namespace`` (a notebook's, or the loaded module's) holds something else under: a reader's
    ``svm = my_svm``. Imports not yet loaded are not compared."""
    out = []
    for alias, (target, name) in binds.items():
        if alias.startswith("*") or alias not in namespace or target not in sys.modules:
            continue
        expected = sys.modules[target] if not name else getattr(sys.modules[target], name, namespace[alias])
        if namespace[alias] is not expected:
            out.append(alias)
    return sorted(out)


def class_literals(body: types.CodeType) -> set[tuple[str, str]]:
    """``(name, repr(value))`` of the literal constants a class body stores under a name (the defaults of a
    dataclass's fields), read off its bytecode's constants in order: each ``STORE_NAME`` after a ``LOAD_CONST``."""
    import dis

    none = last = object()  # no constant loaded just before
    out = set()
    for ins in dis.get_instructions(body):
        if ins.opname == "LOAD_CONST":
            last = ins.argval
        elif ins.opname == "STORE_NAME" and last is not none and literal(last):
            out.add((ins.argval, repr(last)))
            last = none
        elif ins.opname not in ("NOP", "RESUME", "CACHE"):
            last = none
    return out


def code_digest(code: types.CodeType) -> str:
    """SHA-256 of what a code object runs: its bytecode, names and constants (nested code objects digested the
    same way), not its file name or line numbers, so a cell and the module it was exported to compare equal."""
    h = hashlib.sha256()
    for part in (code.co_code, code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars):
        h.update(repr(part).encode() + b"\0")
    h.update(f"{code.co_argcount} {code.co_kwonlyargcount} {code.co_posonlyargcount} {code.co_flags}".encode())
    for const in code.co_consts:
        h.update((code_digest(const) if isinstance(const, types.CodeType) else repr(const)).encode() + b"\0")
    return h.hexdigest()


def runtime_digest(value: object) -> str:
    """A digest of a notebook's definition as it is now: a function's code, a class's methods and attributes,
    a constant's ``repr`` (a value without a stable ``repr`` by its type)."""
    value = inspect.unwrap(value) if callable(value) else value
    if isinstance(value, types.FunctionType):
        return code_digest(value.__code__) + repr(value.__defaults__ if literal(value.__defaults__) else None)
    if isinstance(value, type):
        parts = [f"{k}={runtime_digest(v)}" for k, v in sorted(vars(value).items()) if not k.startswith("__")]
        return hashlib.sha256("\0".join(parts).encode()).hexdigest()
    return repr(value) if literal(value) else type(value).__qualname__


def literal(value: object) -> bool:
    """Whether ``value`` is an immutable literal (its ``repr`` is the same in every process; a dict or list is
    left out: a registry filled at import is not its source's ``{}``)."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return True
    if isinstance(value, (tuple, frozenset)):
        return all(literal(v) for v in value)
    return False
