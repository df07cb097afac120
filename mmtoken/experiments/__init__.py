"""The experiment modules of the chapters not yet in the book's form: ``run(scale)``, ``FIGURES``, claims.

A chapter in the book's form writes its experiment in its own ``#| export`` cells, generated into
:mod:`mmtoken.chapters` (every chapter and appendix with an experiment now is; see issue 24). No module
is left here: :func:`modules` returns an empty list, and this package is kept only until the
integrator removes it.

:func:`mmtoken.chapters.load_all` imports these and the generated modules (registering their claims);
it is what ``python -m mmtoken claims`` and ``python -m mmtoken figures`` call.
"""

from __future__ import annotations

__all__ = ["modules"]

import pkgutil


def modules() -> list[str]:
    """Names of the experiment modules, sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
