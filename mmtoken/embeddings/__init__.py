"""Paper B (Wu, Shevchenko, Oymak, Mondelli 2025): attention with trained embeddings.

The model with token embeddings and a <cls> query, the one-step alignment, the synthetic data model,
token statistics of a labelled corpus, and the real-review runs of chapter 12 (the gather model,
phase two, the validation search, the protocol and the theory's regime).

Modules:

- :mod:`corpus_stats`: Token statistics of a labelled corpus (paper B), shared by the synthetic and real-data chapters.
- :mod:`embedding`: Paper B's model: attention with trained embeddings.
- :mod:`review_model`: Training paper B's model on real reviews: the gather model, fits, the one-step update, phase two, baselines.
- :mod:`review_phase_two`: Phase two of paper B on real data: ``p`` trained with ``E`` fixed, and the selection it makes.
- :mod:`review_regime`: The two-phase protocol in the theory's own regime, on real reviews and on the data model.
- :mod:`review_runs`: Chapter 12's runs, one model at a time: the setups, the splits and the prepared data, the training.
- :mod:`review_search`: The validation search of chapter 12: every choice made on a split carved from the training reviews.
- :mod:`review_seeds`: What chapter 12 computes per held-out seed and once per data set, through the results cache.
- :mod:`synthetic`: Synthetic data from paper B's data model: one important token per sequence.
"""

__all__: list[str] = []
