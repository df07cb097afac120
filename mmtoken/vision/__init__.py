"""The vision transformer of chapter 9 (paper A's real-data experiment, its Section 4).

A small ViT trained on Fashion-MNIST (CIFAR-10 at the paper scale) and its cached runs.

Modules:

- :mod:`vit`: A small vision transformer with a [CLS] token, and the statistics of its attention.
- :mod:`vit_cache`: The ViT run cache: what a run is (:class:`Experiment`), what it records (:class:`Result`), where it is kept.
- :mod:`vit_runs`: Training runs of the small ViT, cached and validated: how a run is trained and fingerprinted.
- :mod:`vit_train`: Training the small ViT of :mod:`mmtoken.vision.vit`: the schedule, augmentation, normalisation, the loop.
"""

__all__: list[str] = []
