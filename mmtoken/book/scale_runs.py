"""The chapters' runs at paper scale, as ``benchmarks/paper_scale.py`` (``make scale-times``) measured them and as
the claims ledger shows them beside each claim's status (nothing here computes or runs anything).

The paper scale does not run in the book's build or its CI (a chapter takes minutes): the script runs each chapter
in a fresh kernel at ``MMTOKEN_SCALE=paper`` from an empty data folder and stores, per chapter, the verdict of
each claim it printed, whether it finished or was stopped at its time limit, and the commit and date of the run
(``benchmarks/results/paper_scale.json``, shipped with the package). :func:`chapter_run` reads one chapter's
entry; :class:`ChapterRun` says what the ledger shows for it: a claim's verdict or why there is none
(:meth:`ChapterRun.verdict`), whether it differs from the claim's status in the ledger (:meth:`ChapterRun.differs`),
and the line that dates the chapter's run (:meth:`ChapterRun.line`). :mod:`mmtoken.book.html_tables` and
:mod:`mmtoken.book.text_tables` render them.
"""

from __future__ import annotations

__all__ = ["FILE", "SCALE", "VERDICTS", "DIFFERS", "NOT_RUN", "stopped", "limit_s", "ChapterRun", "chapter_run"]

from dataclasses import dataclass

FILE = "paper_scale"
"""The results file (``<benchmark results>/paper_scale.json``): ``{scale: {notebook: run}}``."""
SCALE = "paper"
VERDICTS = ("pass", "known miss", "FAIL")
"""The verdicts that can differ: a claim whose data are missing or that was not computed has none to compare."""
DIFFERS = "≠ status"
"""The mark of a paper-scale verdict that differs from the claim's status in the ledger (each difference is
explained in the claim's chapter)."""
NOT_RUN = {
    "part1/09_vit_sparsity": "needs a GPU at paper scale",
    "part2/12_real_reviews": "needs a GPU at paper scale",
}
"""Why a chapter with claims is not in ``paper_scale.py``'s ``CHAPTERS`` (``tests/test_pdf_tables.py`` checks that
every chapter with claims is in one or the other); any other chapter absent from the file was simply not run."""


def stopped(run: dict) -> bool:
    """Whether the run was stopped at the script's time limit (its wall time is then a lower bound)."""
    return run["status"] == "timeout"


def limit_s(run: dict) -> float:
    """The time limit a stopped run was stopped at (seconds): recorded with the run, else the script's option."""
    limit = run.get("limit_s") or run.get("meta", {}).get("timeout_s")
    return float(limit if limit is not None else run["wall_s"])


@dataclass(frozen=True)
class ChapterRun:
    """One chapter's run at paper scale, or its absence.

    Parameters
    ----------
    chapter : str
        The notebook as ``paper_scale.py`` names it (``part1/02_global``); empty for the claims of no chapter.
    run : dict or None
        Its entry in the results file (``status``, ``claims``, ``wall_s``, ``meta``, ...); None where it has none.
    """

    chapter: str
    run: dict | None

    def reason(self) -> str:
        """Why the chapter has no run (the empty string where it has one)."""
        if self.run is not None:
            return ""
        if not self.chapter:
            return "no chapter"
        return NOT_RUN.get(self.chapter, "not in the paper-scale runs")

    def verdict(self, claim_id: str) -> str:
        """``pass``, ``known miss``, ``FAIL``, ... as the run printed it for ``claim_id``, or ``not measured (why)``."""
        if self.run is None:
            return f"not measured ({self.reason()})"
        if stopped(self.run):
            return f"not measured (stopped at {limit_s(self.run):.0f} s)"
        found = (self.run.get("claims") or {}).get(claim_id)
        if found:
            return found
        # a failed run may have printed some claims before it stopped; a finished one lacks a claim added since
        return "not measured (the run failed)" if self.run["status"] == "error" else "not measured (not printed)"

    def differs(self, claim_id: str, status: str) -> bool:
        """Whether the paper-scale verdict of ``claim_id`` and its ``status`` in the ledger are verdicts that differ."""
        paper = self.verdict(claim_id)
        return paper in VERDICTS and status in VERDICTS and paper != status

    def line(self) -> str:
        """When and at which commit the chapter ran at paper scale: ``Paper scale: measured 2026-12-07 at commit
        1f68f92``; or why its claims were not measured."""
        if self.run is None:
            return f"Paper scale: not measured ({self.reason()})"
        meta = self.run.get("meta", {})
        at = f"at commit {meta['commit']}" if meta.get("commit") else ""
        when = " ".join(x for x in (meta.get("date"), at) if x) or "date and commit not recorded"
        if stopped(self.run):
            return f"Paper scale: not measured, stopped at its {limit_s(self.run):.0f} s limit ({when})"
        if self.run["status"] == "error":
            return f"Paper scale: the run failed ({when})"
        return f"Paper scale: measured {when}"


def chapter_run(runs: dict | None, doc: str | None) -> ChapterRun:
    """The paper-scale run of the page ``doc`` (``book/part1/02_global``; None for the claims of no chapter) in the
    contents of the results file ``runs`` (None where there is no file)."""
    chapter = doc.removeprefix("book/") if doc else ""
    return ChapterRun(chapter, ((runs or {}).get(SCALE) or {}).get(chapter) if chapter else None)
