"""Command line of the text data: ``python -m mmtoken.datasets fetch [names] [--force]`` and ``... status``."""

from __future__ import annotations

__all__ = ["main"]

import sys

from mmtoken.config import ConfigError
from mmtoken.datasets.corpus import cache_path, cache_status, read_cache
from mmtoken.datasets.download import DatasetError, DatasetMissing
from mmtoken.datasets.sources import NAMES
from mmtoken.datasets.text import fetch


def main(argv: list[str] | None = None) -> int:
    """Run the command line; the exit status is 0 when every name asked for is cached and good."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m mmtoken.datasets",
        description="Real review-polarity data: IMDB, Rotten Tomatoes and Yelp polarity.",
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch", help="fetch, verify and cache datasets")
    f.add_argument("names", nargs="*", default=["imdb", "rt"], choices=NAMES)
    f.add_argument("--force", action="store_true", help="rebuild even a good cache")
    sub.add_parser("status", help="say which caches exist and whether they are good")
    args = parser.parse_args(argv)
    try:
        if args.cmd == "status":
            for name in NAMES:
                print(f"{name:5s} {cache_status(name)}  {cache_path(name)}")
            return 0
    except (ConfigError, DatasetError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    status = 0
    for name in args.names:
        try:
            path = fetch(name, force=args.force)
            counts = read_cache(path, name).meta["counts"]
            print(f"{name}: {path} ({counts})")
        except (DatasetMissing, DatasetError, ConfigError) as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            status = 1
    return status
