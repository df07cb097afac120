"""Chapter 1 (``book/part1/01_model``, module ``mmtoken.chapters.ch01_model``): Lemma 1's two codes, the W limit,
the settings (fast)."""

import numpy as np
import pytest
import torch

from mmtoken import chapters, config
from mmtoken.attention import instances, svm, train
from mmtoken.attention.model import AttentionProblem
from mmtoken.book import ledger
from mmtoken.chapters import ch01_model as ch

PBAR = np.array(ch.Settings().pbar)


def test_w_run_matches_p_run_and_gradient_is_rank_one():
    inst = instances.fig1("global")
    pr = ch.pair_run("t", inst, instances.PLANE, steps=30, lr=1.0, seed=0)
    assert pr.logits_W.shape == pr.logits_p.shape == (31, 6, 3)
    assert pr.max_logit_gap < 1e-12
    assert pr.sv_ratio.max() < 1e-12
    assert pr.perp_drift < 1e-12
    # W(0) pbar = p(0): the start is honoured
    np.testing.assert_allclose(pr.W0 @ pr.pbar, inst.starts, atol=1e-14)


def test_pair_run_honours_the_loss():
    """Both codes take the loss: the exponential loss moves the logits elsewhere, and they still agree."""
    inst = instances.fig1("global")
    logistic = ch.pair_run("t", inst, instances.PLANE, steps=20, lr=1.0, seed=0)
    exponential = ch.pair_run("t", inst, instances.PLANE, steps=20, lr=1.0, seed=0, loss="exponential")
    assert exponential.max_logit_gap < 1e-12
    assert np.abs(exponential.logits_p[-1] - logistic.logits_p[-1]).max() > 1e-3


def test_w_run_detects_a_wrong_start():
    """Two independent computations: a W(0) that does not map to p(0) must show a gap."""
    inst = instances.fig1("global")
    K = torch.as_tensor(inst.K, dtype=torch.float64)
    gamma = torch.as_tensor(inst.gamma, dtype=torch.float64)
    pbar = torch.tensor([1.0, 0.0], dtype=torch.float64)
    W0 = torch.zeros(6, 2, 2, dtype=torch.float64)  # W(0) pbar = 0, not the starts
    zW, _, _ = ch.w_run(K, gamma, W0, pbar, steps=5, lr=1.0)
    h = train.train_p(inst.problem(), inst.starts, steps=5, lr=1.0, method="gd", record_probs=False)
    zp = torch.einsum("ntm,ksm->ksnt", K, h.p)[:, :, 0]
    assert (zW - zp).abs().max() > 0.1


def test_pair_rejects_mismatched_keymap():
    with pytest.raises(ValueError):
        ch.pair_run("bad", instances.fig1("global"), np.eye(2), steps=1, lr=1.0, seed=0)


def test_w_svm_is_att_svm_times_pbar():
    inst = instances.fig1("global")
    W = svm.w_svm(inst.X, [0], PBAR).x
    q = svm.att_svm(inst.X, [0]).x
    np.testing.assert_allclose(W, np.outer(q, PBAR), atol=1e-6)


def test_normalized_gd_on_w_is_normalized_gd_on_q():
    inst = instances.fig1("global")
    pr = AttentionProblem(inst.X, inst.gamma)
    st, Ws = ch.normalized_gd_on_w(pr, PBAR, np.zeros((3, 3)), steps=300, lr=0.1, record_every=100)
    h = train.train_p(pr, np.zeros((1, 3)), steps=300, lr=0.1, record_every=100, record_probs=False)
    np.testing.assert_allclose(Ws @ PBAR, h.p.numpy()[:, 0], atol=1e-12)
    np.testing.assert_allclose(Ws, np.einsum("sd,m->sdm", Ws @ PBAR, PBAR), atol=1e-12)  # rank one along pbar
    assert list(st) == [0, 100, 200, 300]


def test_frobenius_correlation():
    A = np.arange(6.0).reshape(2, 3)
    assert ch.frobenius_correlation(A, 2 * A) == pytest.approx(1.0)
    assert ch.frobenius_correlation(A, -A) == pytest.approx(-1.0)
    assert np.isnan(ch.frobenius_correlation(np.zeros((2, 3)), A))


# ---------------------------------------------------------------- the settings
def test_settings_defaults_are_the_published_values():
    s = ch.Settings()
    assert (s.steps, s.lr, s.loss, s.seeds) == (500, 1.0, "logistic", (1, 2))
    np.testing.assert_array_equal(PBAR, np.array([1.0, 2.0, 2.0]) / 3.0)  # bit for bit: the published runs
    assert (s.w_lr, s.w_steps, s.plain_lr, s.plain_steps) == (0.1, 10_000, 1.0, 10**6)


def test_settings_at_each_scale():
    assert ch.settings("quick") == ch.Settings()
    paper = ch.settings("paper")
    assert (paper.steps, paper.w_steps, paper.plain_steps) == (5000, 100_000, 10**6)
    with config.use_scale("paper"):
        assert ch.settings() == paper
    with pytest.raises(ValueError, match="scale"):
        ch.settings("papers")


def test_settings_take_lists_and_stay_hashable():
    s = ch.Settings(pbar=[0, 0.6, 0.8], seeds=[3, 4])
    assert s.pbar == (0.0, 0.6, 0.8) and s.seeds == (3, 4)
    assert hash(s) == hash(ch.Settings(pbar=(0.0, 0.6, 0.8), seeds=(3, 4)))


@pytest.mark.parametrize(
    "bad, word",
    [({"pbar": (1.0, 2.0, 2.0)}, "pbar"), ({"pbar": (0.6, 0.8)}, "pbar"), ({"seeds": (1,)}, "seeds")],
)
def test_bad_settings_name_the_field(bad, word):
    with pytest.raises(ValueError, match=word):
        ch.Settings(**bad)


@pytest.mark.parametrize("func", [ch.run, ch.w_direction])
def test_runs_want_settings(func):
    with pytest.raises(ValueError, match="Settings"):
        func({"steps": 10})


def test_run_with_other_settings():
    r = ch.run(ch.Settings(steps=3))
    assert r.steps == 3 and set(r.runs) == {"planar keys (W is 2x2)", "raw tokens as keys (W is 3x3)"}
    assert all(pr.logits_W.shape == (4, 6, 3) and pr.max_logit_gap < 1e-12 for pr in r.runs.values())
    assert ch.run(ch.Settings(steps=3)) is r  # memoised on the settings


def test_the_module_is_chapter_1_and_holds_its_claims():
    assert chapters.module_of("01_model") == ch.__name__
    chapters.load_all()
    ids = {c.id for c in ledger.select(["A.model"])}
    assert ids == {"A.model.w_equals_p", "A.model.w_direction", "A.model.w_plain_gd"}
    assert all(ledger.REGISTRY[i].chapter == "01_model" for i in ids)
    assert set(ch.FIGURES) == {"fig-model-logits", "fig-model-gap", "fig-model-w-direction"}
