"""Every Part IV claim (``D.*``: chapter 16's rates, chapter 17's mirror descent) names its nearest wrong answer
and rejects it.

Each claim's ``against`` applies the claim's own check to the competitor named in its ``competitor=`` text; the
competitor must not pass. The competitor's verdict is read from its record
(:func:`mmtoken.book.competitors.recorded`): the chapters record it when nbval executes them. Without a record
(this file run alone) the competitor is evaluated now. Generic over ``ledger.select(["D"])``, so a claim added to
either chapter is covered without editing this file.
"""

import pytest

from mmtoken import config
from mmtoken.book import competitors, ledger
from mmtoken.chapters import load_all

load_all()
PART4 = list(ledger.select(["D"]))


def test_part4_has_claims():
    assert len(PART4) >= 6


@pytest.mark.parametrize("c", PART4, ids=[c.id for c in PART4])
def test_claim_names_a_competitor(c):
    assert c.competitor.strip(), f"{c.id}: no competitor= text"
    assert callable(c.against), f"{c.id}: no against= function"


@pytest.mark.slow
@pytest.mark.parametrize("c", PART4, ids=[c.id for c in PART4])
def test_competitor_fails_the_claims_check(c):
    with config.use_scale("quick"):
        v = competitors.recorded(c)
    assert v.rejected, f"{c.id}: the claim's check does not reject the competitor ({c.competitor}): {v}"
