"""The records of the claims ledger: a claim's result and its competitor's verdict, each one kind of record.

A record is a result without arrays in the one store (:mod:`mmtoken.book.resultcache`), at
``data/results/<kind>/<scale>/``, under a fingerprint of the code it ran (the claim's function or its competitor
check, and the function that turns its return into the record, followed by :mod:`mmtoken.book.fingerprint`), the
claim's texts and the scale. It is written only by the book's own runs (:func:`recordable`) and read by the claims
appendix, the tests and ``python -m mmtoken claims``. The two kinds are :data:`mmtoken.book.ledger.RESULT` and
:data:`mmtoken.book.competitors.VERDICT`.
"""

from __future__ import annotations

__all__ = ["Kind", "recordable", "code_roots", "records_dir", "record_key", "record", "read_record"]

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from mmtoken import config
from mmtoken.book import fingerprint, resultcache

if TYPE_CHECKING:
    from mmtoken.book.ledger import Claim


@dataclass(frozen=True)
class Kind:
    """One kind of record of a claim: its folder under the results, the entry its record holds, the attribute of
    :class:`Claim` whose code it runs, the function that turns that code's return into the record, and the claim's
    texts its fingerprint covers."""

    folder: str
    entry: str
    func: str
    evaluator: tuple[str, str]
    texts: tuple[str, ...]


def recordable(func: Callable) -> bool:
    """Whether a result of ``func`` is recorded: this process is one of the book's own runs
    (:func:`mmtoken.config.recording`, a switch ``make`` and ``python -m mmtoken claims`` set) and ``func`` is the
    book's unmodified code (:func:`mmtoken.book.fingerprint.is_book_code`: not a test's, nor a reader's edit)."""
    return config.recording() and fingerprint.is_book_code(func)


def code_roots(c: Claim, kind: Kind) -> list[tuple[str, str]]:
    """Where the code of claim ``c``'s record starts (:mod:`mmtoken.book.fingerprint` follows the rest): the
    function of ``kind`` (the claim's, or its competitor check), and the evaluator that turns its return into the record."""
    return fingerprint.roots_of(getattr(c, kind.func)) + [kind.evaluator]


def records_dir(kind: Kind, scale: str) -> Path:
    """Where the records of ``kind`` at ``scale`` live (not created until something is recorded)."""
    return resultcache.results_dir() / kind.folder / scale


def record_key(c: Claim, kind: Kind, scale: str | None = None) -> tuple[str, str, str]:
    """(path, name, fingerprint) of claim ``c``'s record of ``kind`` at ``scale`` (default: the current one); the
    fingerprint covers the code from :func:`code_roots`, the claim's texts of ``kind`` and the scale."""
    if getattr(c, kind.func) is None:
        raise ValueError(f"claim {c.id} has no {kind.func}= function (nothing to record as its {kind.entry})")
    scale = scale or config.scale()
    if scale not in config.SCALES:
        raise ValueError(f"scale must be one of {config.SCALES}, got {scale!r}")
    text = {k: getattr(c, k) for k in kind.texts}
    code = fingerprint.index().digest(code_roots(c, kind))
    fp = resultcache.fingerprint(code, {kind.entry: text, "scale": scale}, "")
    path = resultcache.path_of(f"{kind.folder}/{scale}", c.id, {})
    return str(path), f"{kind.folder}/{scale}/{c.id}", fp


def record(c: Claim, kind: Kind, row: dict) -> None:
    """Store ``row``, claim ``c``'s record of ``kind`` at the current scale, when :func:`recordable`; not if its data
    are missing or it is not yet computed (that depends on the disk, not on the code)."""
    if not (row.get("missing") or row.get("pending")) and recordable(getattr(c, kind.func)):
        resultcache.write_record(*record_key(c, kind), {kind.entry: row}, f"claim {c.id}: {kind.entry}")


def read_record(c: Claim, kind: Kind, scale: str | None = None) -> dict | None:
    """Claim ``c``'s record of ``kind`` at ``scale``, or ``None`` where none is valid for today's code (absent,
    damaged, of other code or another scale)."""
    return resultcache.read_record(*record_key(c, kind, scale), kind.entry)
