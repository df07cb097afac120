"""The trained runs that travel with the repository: chapters 9 and 12, so that ``make test`` retrains nothing unchanged.

Chapters 9 (the ViT) and 12 (real reviews) train for about half an hour of CPU. What they read back (histories,
metrics, the arrays they plot; no checkpoint) is carried in ``book/trained/`` (:func:`mmtoken.config.trained_dir`),
in the one store's own file names and format (:mod:`mmtoken.book.resultcache`), with a manifest: per file its name,
fingerprint, code digest and the code's roots, size, SHA-256, CPU seconds, machine and date. The store reads a
carried file when its fingerprint is today's (the code that trained it, its configuration and data); a change to the
training code makes it stale, so CI trains it and :func:`check` (a test) fails until ``make trained`` has rewritten
the folder. ``make reproduce`` retrains everything without it and compares (``scripts/reproduce.py``).
"""

from __future__ import annotations

__all__ = ["CARRIED", "MANIFEST", "MAX_BYTES", "REPRODUCED", "owners", "carry", "check", "last_reproduced"]

import json
from collections.abc import Sequence
from pathlib import Path

from mmtoken.book import fingerprint, resultcache
from mmtoken.datasets.download import atomic_write_bytes, sha256_file

CARRIED = {"09_vit_sparsity": ("vit", "09_vit_sparsity"), "12_real_reviews": ("real_reviews",)}
"""Chapter -> the owners (folders of :func:`mmtoken.book.resultcache.results_dir`) whose results are carried: the
trained runs and what the chapter computes from them."""
MANIFEST = "manifest.json"
REPRODUCED = "reproduce.json"
"""The record of the last ``make reproduce`` that passed (when, on what machine, the commit, how long), kept with
the benchmark results (:func:`mmtoken.book.html_tables.benchmark_results`, shipped with the package) and shown by
the claims appendix (:func:`last_reproduced`)."""
MAX_BYTES = 20_000_000
"""The most the carried runs may take (issue 42): the repository stays quick to clone."""
FIX = "run `make trained` (it retrains chapters 9 and 12 from an empty data folder) and commit book/trained"


def owners() -> tuple[str, ...]:
    """Every owner whose results are carried, in order."""
    return tuple(o for chapter in CARRIED.values() for o in chapter)


def carry(source: Path, target: Path, owners: Sequence[str] = owners()) -> dict:
    """Copy every result of ``owners`` under ``source`` (a data folder's ``results``, just computed from an empty one)
    into ``target``, replacing what ``target`` held for those owners, and write the manifest. Files named
    ``*-checkpoints-*`` are left out. Raises ``ValueError`` when the files would exceed :data:`MAX_BYTES`."""
    files = sorted(
        p
        for owner in owners
        for p in (source / owner).rglob("*.npz")
        if ".locks" not in p.parts and "-checkpoints-" not in p.name
    )
    total = sum(p.stat().st_size for p in files)
    if total > MAX_BYTES:
        raise ValueError(f"the trained runs take {total:,} bytes, more than {MAX_BYTES:,}: store less")
    for owner in owners:
        for old in (target / owner).rglob("*.npz") if (target / owner).is_dir() else ():
            old.unlink()
    entries = []
    for p in files:
        header, _ = resultcache.read_header(p)
        rel = p.relative_to(source)
        atomic_write_bytes(target / rel, p.read_bytes())
        roots = [tuple(r) for r in header["made"].get("roots", [])]
        made = header["made"]
        entries.append(
            {
                "file": rel.as_posix(),
                "name": header["name"],
                "fingerprint": header["fingerprint"],
                "roots": [list(r) for r in roots],
                "code": fingerprint.index().digest(roots),
                "bytes": p.stat().st_size,
                "sha256": sha256_file(p),
                **{k: made.get(k) for k in ("cpu_seconds", "wall_seconds", "machine", "date")},
            }
        )
    manifest = {"format": resultcache.FORMAT, "owners": list(owners), "bytes": total, "files": entries}
    atomic_write_bytes(target / MANIFEST, (json.dumps(manifest, indent=1) + "\n").encode())
    return manifest


def check(target: Path) -> list[str]:
    """What is wrong with the trained runs in ``target`` (empty when nothing): the manifest unreadable, a file
    missing, altered or unlisted, more than :data:`MAX_BYTES`, or a run whose code changed since it was trained (its
    roots' code digest is not today's), each with the command that mends it."""
    try:
        manifest = json.loads((target / MANIFEST).read_text())
        listed = {e["file"]: e for e in manifest["files"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"{target / MANIFEST} cannot be read ({type(exc).__name__}); {FIX}"]
    problems = []
    present = {p.relative_to(target).as_posix() for p in target.rglob("*.npz")}
    for file in sorted(present - set(listed)):
        problems.append(f"{file} is not in the manifest; {FIX}")
    if sum(e["bytes"] for e in listed.values()) > MAX_BYTES:
        problems.append(f"the trained runs exceed {MAX_BYTES:,} bytes")
    for file, e in sorted(listed.items()):
        path = target / file
        if not path.is_file() or sha256_file(path) != e["sha256"]:
            problems.append(f"{file} is missing or not the file the manifest lists; {FIX}")
            continue
        roots = [tuple(r) for r in e["roots"]]
        try:
            today = fingerprint.index().digest(roots)
        except ValueError as exc:  # a root's module is gone
            today = str(exc)
        if not roots or today != e["code"]:
            problems.append(f"{e['name']} was trained by code that has changed since ({file}); {FIX}")
    return problems


def last_reproduced() -> str:
    """For the claims appendix: when and where ``make reproduce`` last passed, or that it has not yet (wrapped to
    the book's column, :data:`mmtoken.book.report.OUTPUT_WIDTH`)."""
    import textwrap

    from mmtoken.book.html_tables import benchmark_results
    from mmtoken.book.report import OUTPUT_WIDTH

    try:
        r = json.loads((benchmark_results() / REPRODUCED).read_text())
        text = (
            f"`make reproduce` last passed on {r['date']}, commit {r['commit']}, on {r['machine']}: "
            f"{r['notebooks']} notebooks against their stored outputs and {r['carried_runs']} carried runs "
            f"against their retraining, in {round(r['seconds'] / 60)} minutes."
        )
    except (OSError, ValueError, KeyError, TypeError):
        text = "`make reproduce` has not passed yet (no record of it)."
    return textwrap.fill(text, OUTPUT_WIDTH)
