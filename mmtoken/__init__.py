"""mmtoken: max-margin token selection in attention, as an executable book.

The package is the book's library, by topic (as QuantEcon.py is); each topic is a subpackage
whose docstring lists its modules (``help(mmtoken.attention)``):

- :mod:`mmtoken.attention`: paper A, one softmax attention layer selecting tokens (model, losses,
  gradients, trainers and their compiled kernels, the hard-margin problems, geometry, instances).
- :mod:`mmtoken.embeddings`: paper B, attention with trained embeddings, and the real-review runs of chapter 12.
- :mod:`mmtoken.selfattention`: paper C, transformers as SVMs.
- :mod:`mmtoken.vision`: the vision transformer of chapter 9, its runs and their cache.
- :mod:`mmtoken.datasets`: the offline data (IMDB, Yelp, Rotten Tomatoes, Fashion-MNIST,
  CIFAR-10); ``python -m mmtoken.datasets fetch|status``.
- :mod:`mmtoken.book`: what checks, stores and shows results: the claims ledger, the results cache,
  the book's order and titles, the claims appendix, the figures' theme.
- :mod:`mmtoken.chapters`: each chapter's experiment (settings, ``run``, figures, claims),
  generated from the book's ``#| export`` cells; never edited by hand.
- set-up: :mod:`mmtoken.config` (the quick/paper switch, device, seeds, progress) and
  :mod:`mmtoken.validate` (argument checks, and the chapters' ``Settings`` checks of :mod:`mmtoken.rules`);
  ``python -m mmtoken claims|figures``.

A chapter's experiment is read in the chapter and run from there; outside the book, import its
generated module: ``from mmtoken.chapters import ch02_global as ch; ch.run()`` (the published settings at
the current scale) or ``ch.run(ch.Settings(lr=0.5))``. A primitive is imported from its topic, which
re-exports the names a reader uses (its ``__all__``): ``from mmtoken.attention import att_svm, train_p``, or
a module, ``from mmtoken.attention import svm, train``. ``import mmtoken`` imports no topic (no torch).
"""

import importlib

__version__ = "0.1.0"
__all__ = ["__version__"]

TOPICS = ("attention", "embeddings", "selfattention", "vision", "datasets", "book", "chapters")
"""The subpackages, imported on first use (``import mmtoken`` stays light: no torch)."""


def __getattr__(name: str):
    # ``mmtoken.attention`` without importing it first; anything else is a plain AttributeError
    if name in TOPICS:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *TOPICS])
