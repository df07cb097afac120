"""ATT-SVM, relaxed, head and W-form SVMs (mmtoken.attention.svm) and their solvers (mmtoken.attention.svm_solvers): KKT,
independent solver, closed forms, errors."""

import numpy as np
import pytest

from mmtoken.attention import geometry, instances, svm, svm_solvers


def test_att_svm_kkt_and_nnls_agree():
    rng = np.random.default_rng(1)
    for _ in range(10):
        K = rng.normal(size=(2, 3, 5))
        alpha = rng.integers(0, 3, size=2)
        sol = svm.att_svm(K, alpha)
        assert max(sol.kkt_residuals().values()) < 1e-6
        np.testing.assert_allclose(svm_solvers.min_norm_nnls(sol.D, sol.b), sol.x, atol=1e-6)


def test_att_svm_closed_form_one_constraint():
    # one input, two tokens: p_mm = d / ||d||^2 with d = k_0 - k_1
    K = np.array([[[1.0, 2.0], [0.0, -1.0]]])
    d = K[0, 0] - K[0, 1]
    np.testing.assert_allclose(svm.att_svm(K, [0]).x, d / (d @ d), atol=1e-7)


def test_fig1_gmm_is_the_known_solution():
    inst = instances.fig1("global")
    sol = svm.att_svm(inst.K, [0])
    d = inst.K[0, 0] - inst.K[0, 2]  # the only active constraint
    np.testing.assert_allclose(sol.x, d / (d @ d), atol=1e-7)
    assert geometry.svm_neighbours(inst.K, [0], sol.x) == [(0, 2)]


def test_infeasible_selection_names_the_input():
    # token 2 is the midpoint of tokens 0 and 1: no direction makes it strictly largest
    K = np.array([[[1.0, 0.0], [-1.0, 0.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])
    with pytest.raises(svm.InfeasibleSVM, match=r"input\(s\) \[0\]"):
        svm.att_svm(K, [2, 0])


def test_bad_selection_shapes():
    K = np.zeros((2, 3, 2))
    with pytest.raises(ValueError, match="shape"):
        svm.att_svm(K, [0])
    with pytest.raises(ValueError, match="index tokens"):
        svm.att_svm(K, [0, 3])
    with pytest.raises(ValueError, match="NaN"):
        svm.att_svm(np.full((1, 2, 2), np.nan), [0])


def test_relaxed_svm_drops_non_support_margins():
    inst = instances.fig3("loose")
    alpha = [1, 1, 1]
    full = svm.att_svm(inst.K, alpha)
    relaxed = svm.relaxed_att_svm(inst.K, alpha, support=[0, 1])
    assert np.linalg.norm(relaxed.x) <= np.linalg.norm(full.x) + 1e-9
    assert max(relaxed.kkt_residuals().values()) < 1e-6
    m = geometry.margins(inst.K, alpha, relaxed.x)
    assert np.nanmin(m[[0, 1]]) >= 1 - 1e-6 and np.nanmin(m[2]) >= -1e-6


def test_head_svm_and_support():
    inst = instances.fig3("loose")
    sol = svm.head_svm(inst.X, inst.Y, [1, 1, 1])
    assert max(sol.kkt_residuals().values()) < 1e-6
    assert 2 not in svm.head_support(sol)  # the loose third input is not a support vector


def test_w_svm_is_rank_one_outer_product():
    """min ||W||_F s.t. (x_a - x_t)^T W p >= 1 has the solution p_mm(X) p^T / ||p||^2."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(2, 3, 4))
    p = rng.normal(size=3)
    W = svm.w_svm(X, [0, 1], p).x
    q = svm.att_svm(X, [0, 1]).x
    np.testing.assert_allclose(W, np.outer(q, p) / (p @ p), atol=1e-6)
    assert np.linalg.svd(W, compute_uv=False)[1] < 1e-6


# ----------------------------------------------------------------------------- right at every scale (issue 14, item 1)
def _issue_instance():
    rng = np.random.default_rng(0)
    K = rng.normal(size=(3, 4, 2))
    return K, (K @ [1, 0.3]).argmax(-1)


@pytest.mark.parametrize("c", [1e-300, 1e-150, 1e-5, 1e5, 1e150, 1e300])
def test_att_svm_is_right_at_every_scale(c):
    """The issue's instance: at 1e5 the old solver returned p_mm 3.7x too long, at 1e-5 and 1e150 'infeasible'."""
    K, a = _issue_instance()
    base = svm.att_svm(K, a)
    sol = svm.att_svm(K * c, a)
    np.testing.assert_allclose(sol.x * c, base.x, rtol=1e-7)
    assert max(sol.kkt_relative().values()) <= svm_solvers.KKT_TOL
    margins = geometry.margins(K * c, a, sol.x)
    assert np.nanmin(margins) == pytest.approx(1.0, rel=1e-7)  # some constraint active
    assert geometry.svm_neighbours(K * c, a, sol.x) == geometry.svm_neighbours(K, a, base.x)
    assert np.isfinite(sol.margin) and sol.margin == pytest.approx(base.margin * c, rel=1e-7)


@pytest.mark.parametrize("c", [1e-5, 1e5, 1e150])
def test_relaxed_head_and_w_svm_scale(c):
    K, a = _issue_instance()
    Y = np.array([1.0, -1.0, 1.0])
    np.testing.assert_allclose(svm.relaxed_att_svm(K * c, a, [0]).x * c, svm.relaxed_att_svm(K, a, [0]).x, rtol=2e-7)
    np.testing.assert_allclose(svm.head_svm(K * c, Y, a).x * c, svm.head_svm(K, Y, a).x, rtol=2e-7)
    p = np.array([0.5, -2.0])
    np.testing.assert_allclose(svm.w_svm(K * c, a, p).x * c, svm.w_svm(K, a, p).x, rtol=2e-7)


def test_feasible_selection_is_never_called_infeasible_at_any_scale():
    inst = instances.fig1("global")
    gamma = inst.gamma
    for c in (1e-8, 1e-5, 1.0, 1e5, 1e150):
        r = geometry.classify(inst.K * c, gamma, [0])
        assert r.feasible and r.globally_optimal, c


def test_solver_failed_is_not_infeasible():
    assert issubclass(svm.InfeasibleSVM, ValueError) and not issubclass(svm.SolverFailed, ValueError)
    assert not issubclass(svm.InfeasibleSVM, svm.SolverFailed) and not issubclass(svm.SolverFailed, svm.InfeasibleSVM)


def test_a_wrong_solver_answer_is_caught_by_the_check(monkeypatch):
    """A Clarabel point that is feasible but too long (the old 1e5 failure) never reaches the caller."""
    K, a = _issue_instance()
    true = svm.att_svm(K, a).x
    c = 1 / np.abs(K[np.arange(3), a][:, None] - K).max()  # any positive scale: the fake ignores it
    monkeypatch.setattr(svm_solvers, "clarabel_qp", lambda G, h: (3.7 * true / c, np.zeros(len(h)), "optimal"))
    sol = svm.att_svm(K, a)
    assert sol.check["method"] != "clarabel"  # the raw point was refused
    np.testing.assert_allclose(sol.x, true, rtol=1e-9)


def test_infeasibility_is_confirmed_independently(monkeypatch):
    K, a = _issue_instance()
    monkeypatch.setattr(svm_solvers, "clarabel_qp", lambda G, h: (None, None, "infeasible"))  # a solver that lies
    sol = svm.att_svm(K, a)  # the NNLS route answers
    assert sol.check["method"] == "nnls"
    no_certificate = lambda G, h: (None, np.zeros(len(h)), 0.3)  # no point, and a bound far above rounding
    monkeypatch.setattr(svm_solvers, "ldp_rounds", no_certificate)
    with pytest.raises(svm.SolverFailed, match="cannot be decided"):
        svm.att_svm(K, a)


# ----------------------------------------------------------------------------- degenerate problems (item 4)
def test_min_norm_nnls_without_constraints_does_not_reach_scipy():
    """An empty constraint matrix used to double-free inside scipy and kill the process."""
    np.testing.assert_array_equal(svm_solvers.min_norm_nnls(np.zeros((0, 3)), np.zeros(0)), np.zeros(3))
    np.testing.assert_array_equal(svm_solvers.min_norm_nnls(np.ones((2, 2)), -np.ones(2)), np.zeros(2))
    with pytest.raises(svm.InfeasibleSVM):
        svm_solvers.min_norm_nnls(np.zeros((1, 2)), np.ones(1))
    with pytest.raises(ValueError, match="b must have shape"):
        svm_solvers.min_norm_nnls(np.ones((2, 2)), np.ones(3))


def test_one_token_per_input_is_refused():
    with pytest.raises(ValueError, match="T = 1"):
        svm.att_svm(np.ones((2, 1, 2)), [0, 0])


def test_mask_hiding_the_selected_token_is_refused():
    K = np.random.default_rng(0).normal(size=(2, 3, 2))
    mask = np.ones((2, 3), bool)
    mask[1, 2] = False
    with pytest.raises(ValueError, match=r"mask hides the selected token of input\(s\) \[1\]"):
        svm.att_svm(K, [0, 2], mask)
    mask = np.array([[True, False, False], [False, False, True]])  # only the selected tokens are real
    with pytest.raises(ValueError, match="no constraint"):
        svm.att_svm(K, [0, 2], mask)


def test_complex_and_fractional_input_is_refused_not_truncated():
    K = np.random.default_rng(0).normal(size=(2, 3, 2))
    with pytest.raises(ValueError, match="K must be real"):
        svm.att_svm(K + 1j, [0, 1])
    with pytest.raises(ValueError, match="alpha must hold integer"):
        svm.att_svm(K, [0.5, 1])
    np.testing.assert_allclose(svm.att_svm(K, [0.0, 1.0]).x, svm.att_svm(K, [0, 1]).x)  # integral floats are fine
    with pytest.raises(ValueError, match="support"):
        svm.relaxed_att_svm(K, [0, 1], [])
    with pytest.raises(ValueError, match="support"):
        svm.relaxed_att_svm(K, [0, 1], [0.5])


def test_identical_tokens_are_certified_infeasible():
    K = np.array([[[1.0, 2.0], [1.0, 2.0], [0.0, 0.0]]])
    with pytest.raises(svm.InfeasibleSVM, match="zero"):
        svm.att_svm(K, [0])


def test_svm_exports_the_solvers_types_and_errors():
    """``svm.att_svm``'s solution and errors, and the solver names the chapters call, are the solvers' own."""
    for name in ("SVMSolution", "InfeasibleSVM", "SolverFailed", "KKT_TOL", "SOLVER", "min_norm_nnls"):
        assert getattr(svm, name) is getattr(svm_solvers, name), name
    assert isinstance(svm.att_svm(np.array([[[1.0, 0.0], [0.0, 1.0]]]), [0]), svm_solvers.SVMSolution)


# ----------------------------------------------------------------------------- certificates at their own rounding
# Chapter 14 at paper scale (d = 2, instance 194, selection (3, 2, 1)): rows (x_a - x_t) (x) z_i of the W model.
# Input 0's selected token lies inside its other tokens' hull (its rows are rank 2 but for rounding) and input 1's
# query is small, so its rows, 100 times shorter, set the normalisation: the Farkas multipliers sum to 47 times
# h^T u, and ||G^T u|| = 0.6 eps sum u_j leaves a margin bound of 6.5e-15, above 16 eps (3.6e-15).
CH14_ROWS = np.array([
    [0.2381169534282309, -0.3269135714141391, -0.3739114138428813, 0.5133473863662924],
    [-0.3042171203392088, 0.41766326951344523, -0.42254657769656134, 0.5801191759545988],
    [-0.10318759709621843, 0.14166746805172512, 0.16243103308320692, -0.22300347946339785],
    [0.0021801743529966675, 0.001648282408643105, -0.006695878965119369, -0.0050623013216532994],
    [0.0007769906804845229, 0.0005874301147346045, -0.014499818262099241, -0.01096233213508349],
    [0.02035976236017828, 0.015392639628252332, 0.015350816096451897, 0.011605714054620731],
    [0.19183160361016832, 0.7409737544439752, 0.3743668921190903, 1.4460393197604546],
    [-0.04610753513938812, -0.17809616756276228, 0.19503389266048515, 0.7533429996349295],
    [-0.10627307335264025, -0.4104931443852654, 0.39483766023016836, 1.5251102424768277],
])  # fmt: skip


def _inside_hull_rows(seed: int = 52, small: float = 1e-2) -> np.ndarray:
    """The same degeneracy, drawn: input 0's token 3 a convex combination of its tokens 0..2 (exactly infeasible
    but for rounding), input 1's query ``small`` times input 0's; keys ``vec(x z^T)``."""
    rng = np.random.default_rng(seed)
    tri = rng.normal(size=(3, 2))
    x0 = np.vstack([tri, rng.dirichlet(np.ones(3)) @ tri])
    x1 = rng.normal(size=(3, 2))
    z0, z1 = rng.normal(size=2), small * rng.normal(size=2)
    K0, K1 = np.einsum("ta,b->tab", x0, z0).reshape(4, 4), np.einsum("ta,b->tab", x1, z1).reshape(3, 4)
    return np.vstack([K0[3] - K0[:3], K1[0] - K1[1:]])


def _exact_gordan(D: np.ndarray, support) -> bool:
    """Whether rows ``support`` (``k + 1`` of them, in ``k`` dimensions) are positively dependent in exact rational
    arithmetic on the float64 entries: the null vector ``u_j = (-1)^j det(D_S^T without column j)`` of one sign,
    which proves ``D x >= 1`` infeasible (Gordan)."""
    from fractions import Fraction

    def det(M):
        M, out = [row[:] for row in M], Fraction(1)
        for c in range(len(M)):
            p = next((r for r in range(c, len(M)) if M[r][c] != 0), None)
            if p is None:
                return Fraction(0)
            if p != c:
                M[c], M[p], out = M[p], M[c], -out
            out *= M[c][c]
            for r in range(c + 1, len(M)):
                f = M[r][c] / M[c][c]
                M[r] = [a - f * b for a, b in zip(M[r], M[c])]
        return out

    A = [[Fraction(float(D[j, i])) for j in support] for i in range(D.shape[1])]  # D_S^T, k x (k + 1)
    u = [(-1) ** j * det([row[:j] + row[j + 1 :] for row in A]) for j in range(len(support))]
    return all(v > 0 for v in u) or all(v < 0 for v in u)


@pytest.mark.parametrize("D", [CH14_ROWS, _inside_hull_rows()], ids=["chapter 14", "drawn"])
def test_certificate_resting_on_long_rows_is_at_its_own_rounding(D):
    """NNLS's certificate is as exact as float64 allows; its bound's rounding is that of ``G^T u`` over ``h^T u``,
    so an infeasible problem is certified (it was SolverFailed: 'neither resolves a point nor certifies')."""
    from scipy.optimize import linprog

    b = np.ones(len(D))
    lp = linprog(np.zeros(D.shape[1]), A_ub=-D, b_ub=-b, bounds=[(None, None)] * D.shape[1], method="highs")
    assert lp.status == 2  # independent: HiGHS finds D x >= 1 infeasible
    with pytest.raises(svm.InfeasibleSVM, match="certificate"):
        svm_solvers.min_norm_nnls(D, b)


def test_chapter_14_rows_are_exactly_infeasible():
    """The stored rows are infeasible in exact arithmetic, not only to HiGHS's tolerances."""
    assert _exact_gordan(CH14_ROWS, (0, 2, 3, 4, 8))
