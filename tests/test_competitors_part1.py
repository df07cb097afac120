"""Every claim of Part I (``A.*``, the ViT claims ``A.vit.*`` of chapter 9 aside) names the nearest wrong answer
its threshold must reject, and its own check applied to that competitor fails.

Both are read from their records (:func:`mmtoken.book.ledger.recorded`, :func:`mmtoken.book.competitors.recorded`):
the chapters record them when nbval executes them, so ``make test`` does not compute a chapter's runs a second
time here. Without a record (this file run alone) they are evaluated now; the competitor checks reuse the claims'
runs (memoised per process). The cheap ones run in the unit tests, the ones needing a chapter's whole run are ``slow``.
"""

import pytest

from mmtoken import config
from mmtoken.book import competitors, ledger
from mmtoken.chapters import load_all

CHEAP = ("A.global.stationary_counterexample", "A.inputs.published_draw")


def part1_claims() -> list[ledger.Claim]:
    load_all()
    return [c for c in ledger.select(["A"]) if not c.id.startswith("A.vit.")]


def test_every_part1_claim_names_a_competitor_and_its_check():
    claims = part1_claims()
    assert len(claims) >= 25
    for c in claims:
        assert c.competitor.strip(), f"{c.id}: no competitor named"
        assert callable(c.against), f"{c.id}: no against() check of its competitor"


def test_theorem_claims_check_a_theorem():
    """A claim of kind theorem says which theorem (or lemma/corollary) of paper A its algorithm is the one of."""
    for c in part1_claims():
        if c.kind == "theorem":
            text = c.checks.lower()
            assert "theorem" in text or "thm" in text or "corollary" in text, c.id
            assert "normalized gd" not in text or "not" in text, f"{c.id}: a normalized-GD check is an observation"


def _params(cheap: bool):
    load_all()
    out = []
    for c in part1_claims():
        is_cheap = c.id in CHEAP
        if is_cheap == cheap:
            marks = () if cheap else (pytest.mark.slow,)
            out.append(pytest.param(c.id, id=c.id, marks=marks))
    return out


def _check(cid: str) -> None:
    c = ledger.REGISTRY[cid]
    with config.use_scale("quick"):
        (own,) = [r for r in ledger.recorded([cid]) if r.id == cid]
        rival = competitors.recorded(c)
    assert own.passed or own.known_miss, f"{cid}: the claim itself does not pass ({own.error or own.measured})"
    assert rival.rejected, f"{cid}: its check does not reject the competitor ({c.competitor}): {rival}"


@pytest.mark.parametrize("cid", _params(cheap=True))
def test_competitor_fails_cheap(cid):
    _check(cid)


@pytest.mark.parametrize("cid", _params(cheap=False))
def test_competitor_fails(cid):
    _check(cid)
