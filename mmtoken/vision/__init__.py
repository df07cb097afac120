"""The vision transformer of chapter 9 (paper A's real-data experiment, its Section 4).

A small ViT trained on Fashion-MNIST (CIFAR-10 at the paper scale), and its runs kept in the one store
(:mod:`mmtoken.book.resultcache`, owner ``vit``), trained in the one worker pool (:mod:`mmtoken.workers`).

Modules:

- :mod:`vit`: A small vision transformer with a [CLS] token, and the statistics of its attention.
- :mod:`vit_train`: Training the small ViT of :mod:`mmtoken.vision.vit`: the schedule, augmentation, normalisation, the loop.
- :mod:`vit_cache`: What a run is (:class:`~mmtoken.vision.vit_cache.Experiment`), what it records
  (:class:`~mmtoken.vision.vit_cache.Result`, read back from the store), its checkpoints beside it.
- :mod:`vit_runs`: Training runs into the store: the split, the loop that logs a run (``train_into``), and
  ``run_experiments``, which trains the missing runs (several at once in worker processes) and reads them back.
"""

__all__: list[str] = []
