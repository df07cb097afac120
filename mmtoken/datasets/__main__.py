"""``python -m mmtoken.datasets fetch [names] [--force]`` and ``python -m mmtoken.datasets status``: the text data
(:mod:`mmtoken.datasets.cli`)."""

if __name__ == "__main__":
    from mmtoken.datasets.cli import main

    raise SystemExit(main())
