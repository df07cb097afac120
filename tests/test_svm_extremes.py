"""The SVM solvers on valid but extreme input (issue 44): keys at any scale give the scaled answer (each scale in a
fresh interpreter, so a solver that aborts the process fails the test instead of killing pytest), non-finite keys,
other dtypes and norms outside the accepted range are refused by name before any computing."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from mmtoken.attention import svm, svm_lq
from mmtoken.chapters import ch13_w_vs_kq as ch13
from mmtoken.chapters import ch15_multi_token as mt

SCALES = [1e-300, 1e-150, 1e-60, 1e-12, 1e-5, 1.0, 1e5, 1e10, 1e60, 1e150, 1e300]

CHILD = """
import json, sys, warnings
import numpy as np
warnings.simplefilter("ignore")
from mmtoken.attention import svm, svm_lq
from mmtoken.chapters import ch15_multi_token as mt
kind, seed, q = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
K = np.random.default_rng(seed).normal(size=(3, 4, 4)) / 2
a = (K @ np.array([1.0, -0.5, 0.3, 0.8])).argmax(-1)
out = {}
for s in json.loads(sys.argv[4]):
    if kind == "lq":
        x = svm_lq.lq_att_svm(K * s, a, q).x
    elif kind == "l2":
        x = svm.att_svm(K * s, a).x
    else:
        sol = mt.gen_svm(K * s, [[int(t)] for t in a])
        x = sol.x
    out[repr(s)] = (x * s).tolist()
print(json.dumps(out))
"""


def solve_scaled(kind, seed, q):
    """``{scale: x(K * scale) * scale}`` from a fresh interpreter (a crash is a failure with its return code)."""
    p = subprocess.run(
        [sys.executable, "-c", CHILD, kind, str(seed), str(q), json.dumps(SCALES)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, f"{kind} q={q} seed {seed}: rc {p.returncode}\n{p.stderr[-2000:]}"
    return {float(k): np.array(v) for k, v in json.loads(p.stdout.splitlines()[-1]).items()}


@pytest.mark.parametrize(("kind", "q"), [("lq", 1.0), ("lq", 1.5), ("lq", 3.0), ("l2", 2.0), ("gen", 2.0)])
def test_scale_equivariance(kind, q):
    """``x(c K) = x(K) / c`` from 1e-300 to 1e300, for each solver, on two instances."""
    for seed in (1, 4):
        out = solve_scaled(kind, seed, q)
        ref = out[1.0]
        for s, x in out.items():
            tol = 1e-5 if q == 1.0 else 1e-7  # q = 1: the LP's zero entries are at the interior point's tolerance
            np.testing.assert_allclose(x, ref, atol=tol * np.abs(ref).max(), err_msg=f"{kind} q={q} scale {s}")


@pytest.mark.parametrize("height", [1e-15, 1e-12, 1e-9, 1e-5])
def test_a_low_vertex_is_solved_not_called_infeasible(height):
    """An apex ``height`` above a segment: feasible at every height float64 holds; ``p = (0, 1/height)``."""
    K = np.array([[[0.0, height], [-1.0, 0.0], [1.0, 0.0]]])
    x = svm.att_svm(K, [0]).x
    np.testing.assert_allclose(x, [0.0, 1 / height], atol=1e-6 / height)


def keys(seed=1):
    K = np.random.default_rng(seed).normal(size=(3, 4, 4)) / 2
    return K, (K @ np.array([1.0, -0.5, 0.3, 0.8])).argmax(-1)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_keys_are_refused_by_name(bad):
    K, a = keys()
    K[0, 1, 2] = bad
    with pytest.raises(ValueError, match="K"):
        svm_lq.lq_att_svm(K, a, 1.5)
    with pytest.raises(ValueError, match="K"):
        mt.gen_svm(K, [[int(t)] for t in a])


def test_keys_whose_differences_overflow_are_refused_by_name():
    K, a = keys()
    K = K / np.abs(K).max() * 1e308
    with pytest.raises(ValueError, match="K"):
        mt.gen_svm(K, [[int(t)] for t in a])
    with pytest.raises(ValueError, match="K"):
        svm_lq.lq_att_svm(K, a, 1.5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_tensor_dtypes(dtype):
    """Torch tensors of any floating dtype: the answer for their (widened, exact) values."""
    K, a = keys()
    T = torch.tensor(K).to(dtype)
    Kd = T.double().numpy()
    sets = [[int(t)] for t in a]
    np.testing.assert_allclose(mt.gen_svm(T, sets).x, mt.gen_svm(Kd, sets).x, atol=1e-9)
    np.testing.assert_allclose(svm_lq.lq_att_svm(T, a, 1.5).x, svm_lq.lq_att_svm(Kd, a, 1.5).x, atol=1e-6)


@pytest.mark.parametrize("q", [float("nan"), 0.0, 0.5, 1 + 1e-9, 1.01, 6.5, 1e6, float("inf"), "2", True, None])
def test_q_outside_the_range_is_refused_naming_it(q):
    K, a = keys()
    with pytest.raises(ValueError, match=r"q must be 1 or a real number in \[1\.05, 6\]"):
        svm_lq.lq_att_svm(K, a, q)


@pytest.mark.parametrize("q", [1.0, svm_lq.Q_RANGE[0], 2.0, svm_lq.Q_RANGE[1]])
def test_q_at_the_ends_of_the_range_is_solved(q):
    for seed in range(4):
        K, a = keys(seed)
        sol = svm_lq.lq_att_svm(K, a, q)
        assert (sol.D @ sol.x >= 1 - 1e-6).all()


@pytest.mark.parametrize("q", [float("nan"), 0.0, 0.5, -1.0, "3"])
def test_lq_norm_refuses_q_below_one(q):
    with pytest.raises(ValueError, match=r"q must be a real number in \[1, inf\]"):
        svm_lq.lq_norm([1.0, 2.0], q)


def test_lq_norm_values():
    assert svm_lq.lq_norm([3.0, -4.0], 2) == pytest.approx(5.0)
    assert svm_lq.lq_norm([3.0, -4.0], 1) == pytest.approx(7.0)
    assert svm_lq.lq_norm([3.0, -4.0], float("inf")) == pytest.approx(4.0)
    assert svm_lq.lq_norm([1e300, 1e300], 3) == pytest.approx(1e300 * 2 ** (1 / 3))


@pytest.mark.parametrize("m", [0, -1, 6, 2.5, "2"])
def test_polish_names_m_and_its_range(m):
    rng = np.random.default_rng(0)
    X, Z = rng.normal(size=(3, 4, 5)), rng.normal(size=(3, 5))
    with pytest.raises(ValueError, match="m must be"):
        ch13.polish(X, Z, [0, 0, 0], np.eye(5), m)


def test_polish_names_a_misshapen_W():
    rng = np.random.default_rng(0)
    X, Z = rng.normal(size=(3, 4, 5)), rng.normal(size=(3, 5))
    with pytest.raises(ValueError, match=r"W must have shape \(5, 5\)"):
        ch13.polish(X, Z, [0, 0, 0], np.eye(4), 2)
