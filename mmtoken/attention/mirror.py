"""The mirror map of mirror descent with the potential ``psi(p) = (1/q)||p||_q^q``, and its inverse.

Written once for NumPy arrays and torch tensors, for :func:`mmtoken.attention.train.train_p`'s torch loop, the
compiled kernel's wrapper (:mod:`mmtoken.attention.fastpath`) and the l_q Att-SVM's KKT checks
(:mod:`mmtoken.attention.svm_lq`); the numba kernel (:mod:`mmtoken.attention.fastpath_kernels`) has its own
scalar copy, as compiled code cannot call these. Imports NumPy only.
"""

from __future__ import annotations

__all__ = ["mirror_map", "inverse_mirror_map"]

import numpy as np


def _signed_power(x, e: float):
    """``sign(x)|x|^e`` elementwise, for a NumPy array ``(...)`` or a torch tensor ``(...)``: the same type back."""
    sign = x.sign() if hasattr(x, "sign") else np.sign(x)  # torch tensors have .sign(), NumPy arrays do not
    return sign * abs(x) ** e


def mirror_map(p, q: float):
    """``theta = grad psi(p) = sign(p)|p|^(q-1)``, ``(...)``: mirror descent's dual variable."""
    return _signed_power(p, q - 1)


def inverse_mirror_map(theta, q: float):
    """``p = sign(theta)|theta|^(1/(q-1))``, ``(...)``: the primal point of the dual variable ``theta``."""
    return _signed_power(theta, 1 / (q - 1))
