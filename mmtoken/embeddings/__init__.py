"""Paper B (Wu, Shevchenko, Oymak, Mondelli 2025): attention with trained embeddings.

The model with token embeddings and a <cls> query, the one-step alignment, the synthetic data model,
token statistics of a labelled corpus, and the real-review runs of chapter 12 (the gather model,
phase two, the validation search, the protocol and the theory's regime).

Modules:

- :mod:`corpus_stats`: Token statistics of a labelled corpus (paper B), shared by the synthetic and real-data chapters.
- :mod:`embedding`: Paper B's model: attention with trained embeddings.
- :mod:`review_jobs`: Chapter 12's jobs: one stored result each, computed into the store in a worker process or here.
- :mod:`review_model`: Training paper B's model on real reviews: the gather model, fits, the one-step update, phase two, baselines.
- :mod:`review_phase_two`: Phase two of paper B on real data: ``p`` trained with ``E`` fixed, and the selection it makes.
- :mod:`review_regime`: The two-phase protocol in the theory's own regime, on real reviews and on the data model.
- :mod:`review_runs`: Chapter 12's runs, one model at a time: the setups, the splits and the prepared data, the training,
  the key of each result in the store.
- :mod:`review_search`: The validation search of chapter 12: every choice made on a split carved from the training reviews.
- :mod:`review_seeds`: What chapter 12 computes per held-out seed and once per data set, through the one store.
- :mod:`synthetic`: Synthetic data from paper B's data model: one important token per sequence.

The names a reader uses of paper B's model, data model and token statistics are imported here (``from
mmtoken.embeddings import one_step, token_stats``); the modules of chapter 12's runs (``review_*``) are imported by
name, so that this package stays light (no data sets, no results store).
"""

from mmtoken.embeddings.corpus_stats import TokenStats, partial_spearman, spearman, token_stats
from mmtoken.embeddings.embedding import cls_problem, logistic_loss, one_step, one_step_gradient
from mmtoken.embeddings.synthetic import PAD_ID, SyntheticData

__all__ = [
    # the model (attention with trained embeddings) and its one step
    "one_step",
    "one_step_gradient",
    "logistic_loss",
    "cls_problem",
    # the data model
    "SyntheticData",
    "PAD_ID",
    # token statistics of a labelled corpus
    "TokenStats",
    "token_stats",
    "spearman",
    "partial_spearman",
]
