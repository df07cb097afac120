"""mmtoken: max-margin token selection in attention, as an executable book.

The package, by topic (one idea per module):

- set-up: :mod:`config` (size switch, device, seeds, progress), :mod:`validate` (argument checks).
- paper A's selection core: :mod:`model` (the attention model), :mod:`losses`, :mod:`grad`
  (saturation-safe gradients), :mod:`fastpath` (compiled CPU kernel), :mod:`train` (GD, normalized GD,
  regularization paths and the one sphere-descent step), :mod:`joint` (joint training of the head and
  the token), :mod:`smoothness` (the step
  condition), :mod:`svm` (Att-SVM and the other hard-margin problems), :mod:`geometry` (optimal tokens,
  neighbours, cones, correlations),
  :mod:`instances` (the published configurations, :meth:`instances.Instance.gmm`), :mod:`public_code`
  (a replica of the public code, for comparison).
- paper B's embeddings: :mod:`embedding` (the model with trained embeddings), :mod:`synthetic` (the
  data model), :mod:`corpus_stats` (token statistics of a labelled corpus, Spearman).
- paper B on real reviews: :mod:`review_model` (the gather model and its training),
  :mod:`review_phase_two` (``p`` with ``E`` fixed), :mod:`review_search` (the validation search),
  :mod:`review_runs` (chapter 12's setups, splits and data, one model's training), :mod:`review_seeds`
  (every run of a held-out seed, the baselines, their results cache), :mod:`review_regime` (the theory's
  regime).
- the vision transformer: :mod:`vit` (model and attention statistics), :mod:`vit_runs` (cached runs).
- data: :mod:`datasets` (``download``, ``sources``, ``packages``, ``parsers``, ``corpus``, ``text``,
  ``tokenize``, ``images``, ``cli``).
- Part I's long runs, shared by its chapters: :mod:`long_paths` (plain GD over decades, the step
  condition, the planar regularization path), :mod:`random_batch` (normalized GD on a padded batch of
  random instances, and what it selected).
- the book: :mod:`chapters` (each chapter's experiment, generated from the book's ``#| export``
  cells: settings, ``run``, figures, claims; the local and joint paths of chapters 3 and 5 and "your own
  instance" live there), :mod:`ledger` (claims), :mod:`resultcache` (the one results cache),
  :mod:`fingerprint` (results keyed by the code they call), :mod:`report` (claims and numbers as text),
  :mod:`pages` (the book's pages, their order and titles), :mod:`html_tables` (the ledger and the
  benchmarks as HTML), :mod:`plotting` (theme and figure types), ``python -m mmtoken`` (:mod:`__main__`).

A chapter's experiment is read in the chapter and run from there; outside the book, import its
generated module: ``from mmtoken.chapters import ch02_global as ch; ch.run(ch.Settings(lr=0.5))``.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
