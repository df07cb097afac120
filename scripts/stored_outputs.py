"""Let the strict build render the notebooks nbval has just executed, instead of executing them again.

``make test`` executes every notebook exactly once: nbval runs each paired
``.ipynb`` in a fresh kernel and compares what it prints with the outputs
stored in the notebook. Those stored outputs are then what the book shows:

``seed``
    puts each chapter's stored outputs into the build's execution cache
    (``_build/.jupyter_cache``, the cache myst-nb's ``execute_notebooks: cache``
    reads) under the key myst-nb computes from the chapter's ``.md`` (its code
    cells and their metadata, read with myst-nb's own reader). The ``.md`` and
    the ``.ipynb`` must hold the same code: a pair out of sync is an error
    (``make sync``). The build then finds every chapter in the cache and
    executes none.
``count LOG``
    prints, per chapter, how many times ``make test`` executed it: once by
    nbval (every notebook passed to pytest) plus the executions the build
    log ``LOG`` shows (myst-nb's "Executing notebook" lines); exits 1 if any
    chapter was executed more than once.

``make book`` seeds too, with ``--stale execute``: a chapter whose ``.md``
no longer holds the code of its stored ``.ipynb`` is left out of the cache (and
named), so the build executes exactly the chapters whose source changed.
``make book EXECUTE=all`` empties the cache first and executes every chapter;
the paper scale (``MMTOKEN_SCALE=paper``) builds into ``_build/paper/`` with a
cache of its own and is never seeded (the stored outputs are quick-scale ones).

Usage::

    python scripts/stored_outputs.py seed [--cache _build/.jupyter_cache] [--stale error|execute]
    python scripts/stored_outputs.py count _build/strict.log
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def chapters(root: Path = ROOT) -> list[Path]:
    """The ``.md`` pages of the table of contents that are MyST notebooks with a paired ``.ipynb``."""
    from bookcheck import toc_files

    out = []
    for doc in toc_files(root):
        md = root / f"{doc}.md"
        if md.is_file() and md.read_text(encoding="utf-8").startswith("---\njupytext:"):
            out.append(md)
    return out


class OutOfSync(ValueError):
    """A chapter's ``.md`` and its stored ``.ipynb`` hold different code."""


def merged(md: Path) -> nbformat.NotebookNode:
    """The notebook myst-nb reads from ``md``, with the outputs stored in its paired ``.ipynb``;
    :class:`OutOfSync` if the two hold different code."""
    from myst_nb.core.read import read_myst_markdown_notebook
    from myst_parser.config.main import MdParserConfig

    nb = read_myst_markdown_notebook(
        md.read_text(encoding="utf-8"), MdParserConfig(), add_source_map=True, path=str(md)
    )
    stored = nbformat.read(md.with_suffix(".ipynb"), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    ran = [c for c in stored.cells if c.cell_type == "code"]
    if [c.source.strip() for c in code] != [c.source.strip() for c in ran]:
        raise OutOfSync(
            f"{md} and {md.with_suffix('.ipynb').name} hold different code: run `make sync` "
            "(jupytext --update, then execute) before the build"
        )
    for c, r in zip(code, ran):
        c.outputs, c.execution_count = r.outputs, r.execution_count
    for key in ("language_info", "widgets"):
        if key in stored.metadata:
            nb.metadata[key] = stored.metadata[key]
    return nb


def seed(cache_path: Path, stale: str = "error") -> int:
    """Cache every chapter's stored outputs; a chapter out of sync is an error (``stale="error"``,
    ``make test``) or left for the build to execute (``stale="execute"``, ``make book``)."""
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache = get_cache(str(cache_path))
    mds, left = chapters(), []
    for md in mds:
        try:
            nb = merged(md)
        except OutOfSync as exc:
            if stale == "error":
                raise SystemExit(str(exc)) from None
            left.append(md)
            continue
        cache.cache_notebook_bundle(
            CacheBundleIn(nb, str(md.with_suffix(".ipynb"))), check_validity=True, overwrite=True
        )
    done = len(mds) - len(left)
    print(f"stored outputs: {done} notebooks cached for the build in {cache_path}", end="")
    print(" (the build executes none)" if not left else f"; the build executes {len(left)}, changed since stored:")
    for md in left:
        print(f"  {md.relative_to(ROOT) if md.is_relative_to(ROOT) else md}")
    return 0


EXECUTING = re.compile(r"(\S+\.md)\S*: .*Executing notebook using")


def count(log: Path) -> int:
    build = {}
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        m = EXECUTING.search(line)
        if m:
            build[Path(m.group(1)).resolve()] = build.get(Path(m.group(1)).resolve(), 0) + 1
    print("notebook executions in make test (nbval + strict build):")
    worst = 0
    for md in chapters():
        n = 1 + build.get(md.resolve(), 0)
        worst = max(worst, n)
        print(f"  {md.relative_to(ROOT).with_suffix('.ipynb')}: {n} (nbval 1, build {n - 1})")
    return 0 if worst <= 1 else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("seed")
    s.add_argument("--cache", type=Path, default=ROOT / "_build" / ".jupyter_cache")
    s.add_argument(
        "--stale",
        choices=("error", "execute"),
        default="error",
        help="a chapter whose .md changed since its stored .ipynb: an error (make test) or executed (make book)",
    )
    c = sub.add_parser("count")
    c.add_argument("log", type=Path)
    args = p.parse_args(argv)
    return seed(args.cache, args.stale) if args.cmd == "seed" else count(args.log)


if __name__ == "__main__":
    sys.exit(main())
