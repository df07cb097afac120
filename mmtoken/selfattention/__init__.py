"""Paper C (Tarzanagh, Li, Thrampoulidis, Oymak 2023): transformers as support vector machines.

The W model of self-attention (one query per input), its reduction to paper A's problem on the keys,
its trainer, the Frobenius SVM and the random instances of Part III; the (K, Q) factorisation and
the nuclear-norm SVM live in chapter 13, the generalised SVM in chapter 15.

Modules:

- :mod:`tfsvm`: Self-attention read out at a query token, and its ``W`` parameterisation (Part III).

The names a reader uses are imported here (``from mmtoken.selfattention import w_problem, frobenius_svm``).
"""

from mmtoken.selfattention.tfsvm import Run, frobenius_svm, keys_selection, random_instances, train_w, w_keys, w_problem

__all__ = ["w_keys", "w_problem", "train_w", "Run", "frobenius_svm", "keys_selection", "random_instances"]
