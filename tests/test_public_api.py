"""Every module of the package says what it exports: ``__all__``, complete and resolvable.

A reader's ``from mmtoken.attention.svm import *`` or ``dir()``-driven tab completion should list the
module's own functions and classes, not ``np`` and ``torch``; ``py.typed`` tells type checkers
that the inline annotations are the package's interface (PEP 561).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest

import mmtoken

MODULES = sorted(m.name for m in pkgutil.walk_packages(mmtoken.__path__, "mmtoken.") if not m.name.endswith("__main__"))


def test_every_module_is_listed():
    assert {
        "mmtoken.attention.svm",
        "mmtoken.attention.geometry",
        "mmtoken.attention.instances",
        "mmtoken.chapters.ch00_tour",
    } <= set(MODULES)


@pytest.mark.parametrize("name", MODULES)
def test_all_is_complete_and_resolves(name):
    mod = importlib.import_module(name)
    assert hasattr(mod, "__all__"), f"{name} has no __all__"
    exported = list(mod.__all__)
    assert len(exported) == len(set(exported)), f"{name}.__all__ lists a name twice"
    missing = [n for n in exported if not hasattr(mod, n)]
    assert not missing, f"{name}.__all__ names what the module does not define: {missing}"
    assert not [n for n in exported if inspect.ismodule(getattr(mod, n))], f"{name}.__all__ exports a module"
    own = [
        n
        for n, obj in vars(mod).items()
        if not n.startswith("_")
        and (inspect.isfunction(obj) or inspect.isclass(obj))
        and getattr(obj, "__module__", None) == name
    ]
    unlisted = sorted(set(own) - set(exported))
    assert not unlisted, f"{name} defines public {unlisted} but leaves them out of __all__"


def test_star_import_leaves_out_the_imported_libraries():
    ns: dict = {}
    exec("from mmtoken.attention.svm import *", ns)
    assert "att_svm" in ns and "np" not in ns and "torch" not in ns


def test_py_typed_marker_ships():
    assert (Path(mmtoken.__file__).parent / "py.typed").is_file()
