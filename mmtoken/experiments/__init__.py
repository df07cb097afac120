"""One module per chapter: ``run(scale)``, its plots (``FIGURES``) and its claims.

Every module in this package is imported by :func:`load_all`, which is what
``python -m mmtoken claims`` and ``python -m mmtoken figures`` call; there is
no list to keep up to date.
"""
from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType


def modules() -> list[str]:
    """Names of the experiment modules, sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def load_all() -> dict[str, ModuleType]:
    """Import every experiment module (registering its claims)."""
    return {name: importlib.import_module(f"{__name__}.{name}") for name in modules()}
