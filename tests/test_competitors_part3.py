"""Every Part III claim (``C.*``) names its nearest wrong answer and rejects it.

Each claim's ``against`` applies the claim's own check to the competitor named in
its ``competitor=`` text; the competitor must not pass. The claim itself is read
from its record (:func:`mmtoken.book.ledger.recorded`), and so is the competitor's
verdict (:func:`mmtoken.book.competitors.recorded`): the chapters record both when nbval
executes them. Without a record (this file run alone) the competitor is evaluated now.
"""

import pytest

from mmtoken import config
from mmtoken.book import competitors, ledger
from mmtoken.chapters import load_all

load_all()
PART3 = [c for c in ledger.select(["C"])]


def test_part3_has_claims():
    assert len(PART3) >= 9


@pytest.mark.parametrize("c", PART3, ids=[c.id for c in PART3])
def test_claim_names_a_competitor(c):
    assert c.competitor.strip(), f"{c.id}: no competitor= text"
    assert callable(c.against), f"{c.id}: no against= function"


@pytest.mark.slow
@pytest.mark.parametrize("c", PART3, ids=[c.id for c in PART3])
def test_competitor_fails_the_claims_check(c):
    with config.use_scale("quick"):
        v = competitors.recorded(c)
    assert v.rejected, f"{c.id}: the claim's check does not reject the competitor ({c.competitor}): {v}"


def test_every_part3_theorem_box_has_a_theorem_claim():
    """The W GD box, the (K, Q) box (stated why not in chapter 13), the global W boxes and the lemma.

    C.global.reg_path is a theorem claim on a certified minimiser (issue 43, item 8): the ball's problem reduces to
    a disk (two inputs of two tokens) and long_paths.planar_certificate bounds where its global minimiser lies;
    chapter 13's (K, Q) problem has no such certificate and is checked by observations."""
    kinds = {c.id: c.kind for c in PART3}
    for cid in ("C.w.plain_gd", "C.global.reg_path", "C.global.orthogonal", "C.overparam.feasible"):
        assert kinds.get(cid) == "theorem", (cid, kinds.get(cid))
    for cid in (
        "C.w.frobenius",
        "C.kq.nuclear",
        "C.kq.low_rank",
        "C.multi.gen_svm",
        "C.overparam.global_rate",
        "C.global.counterexample",
    ):
        assert kinds.get(cid) == "observation", (cid, kinds.get(cid))
