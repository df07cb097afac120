"""Chapter 12's jobs: one stored result each, computed into the store where :func:`mmtoken.workers.map_jobs` runs it.

A job is ``(kind, arguments)``:

- ``("seed", {"setup": setup, "seed": k})``: :func:`.review_seeds.cached_seed` on the data set of ``setup``, loaded
  by name without a download (or, with ``"dataset": path``, the compact cache of a data set of one's own of that
  name, written by :func:`mmtoken.datasets.corpus.save_cache`);
- ``("search", {"dataset": name})``: :func:`.review_search.cached_search`;
- ``("regime", {"seed": k, "which": ..., "steps": ..., "small": ...})``: :func:`.review_regime.cached`.

:func:`compute_job` computes one into the store and returns nothing: the caller reads the result back from the store
(under the same key), so what a worker process computed and what the caller would compute are one file.
"""

from __future__ import annotations

__all__ = ["KINDS", "check_jobs", "compute_job"]

from collections.abc import Iterable

from mmtoken.datasets import corpus, text
from mmtoken.embeddings import review_regime, review_search, review_seeds

KINDS = ("seed", "search", "regime")
"""The kinds of job: a held-out seed's runs, a validation search, a run of the protocol at the theory's dimension."""


def check_jobs(jobs: Iterable[tuple[str, dict]]) -> list[tuple[str, dict]]:
    """``jobs`` as a list, each a ``(kind, arguments)`` pair of a kind in :data:`KINDS`; ``ValueError`` otherwise."""
    out = []
    for job in jobs:
        if not (isinstance(job, tuple) and len(job) == 2 and job[0] in KINDS and isinstance(job[1], dict)):
            kind = job[0] if isinstance(job, tuple) and job else job
            raise ValueError(f"jobs: a job is (kind, arguments) with kind one of {KINDS}, got {kind!r}")
        out.append(job)
    return out


def compute_job(kind: str, args: dict) -> None:
    """Compute the result of job ``(kind, args)`` into the store (nothing is returned: read it from the store)."""
    check_jobs([(kind, args)])
    if kind == "seed":
        s = args["setup"]
        path = args.get("dataset")
        if path is not None:  # a corpus of one's own, named as the setup's data set
            ds = corpus.read_cache(path, s.dataset, registered=False)
        else:
            ds = text.load(s.dataset, download=False)
        review_seeds.cached_seed(s, ds, args["seed"])
    elif kind == "search":
        review_search.cached_search(**args)
    else:
        review_regime.cached(**args)
