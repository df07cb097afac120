"""The experiment modules of the chapters not yet in the book's form: ``run(scale)``, ``FIGURES``, claims.

A chapter in the book's form writes its experiment in its own ``#| export`` cells, generated into
:mod:`mmtoken.chapters` (the tour, chapters 1-11 and 13-15 so far; see issue 24). The modules left
here, and their chapters (claim ids start with the prefix):

========================  ==================================  ==============================
module                    chapter                             claim prefix
========================  ==================================  ==============================
``real_reviews``          12 ``part2/12_real_reviews``        ``B.<data>.``
========================  ==================================  ==============================

:func:`mmtoken.chapters.load_all` imports these and the generated modules (registering their claims);
it is what ``python -m mmtoken claims`` and ``python -m mmtoken figures`` call.
"""

from __future__ import annotations

__all__ = ["modules"]

import pkgutil


def modules() -> list[str]:
    """Names of the experiment modules, sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))
