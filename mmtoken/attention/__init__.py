"""Paper A (Tarzanagh, Li, Zhang, Oymak 2023): token selection by one softmax attention layer.

The model f(X) = v^T X^T softmax(X W z), its losses and saturation-safe gradients, the trainers (GD,
normalized GD, the Polyak step, mirror descent, joint (p, v), regularization paths) with their
compiled CPU kernels, the hard-margin problems (Att-SVM, its l_q form and other relatives) and the
geometry that compares them, the published instances, and the shared long-run helpers of Part I.

Modules:

- :mod:`fastpath`: A compiled CPU kernel for the ``p``-dynamics of small problems.
- :mod:`fastpath_kernels`: The numba kernels of :mod:`mmtoken.attention.fastpath` (compiled on first use, cached on disk).
- :mod:`geometry`: Geometry of token selection: optimal tokens, SVM-neighbours, local optimality, cones, correlations.
- :mod:`grad`: Saturation-safe gradients of the attention loss (the numerical trap of the book).
- :mod:`instances`: The published configurations of paper A as named constructors, and random instances.
- :mod:`joint`: Joint training of the head ``v`` and the token ``p`` (chapter 5, the published Fig. 3 runs): each moves along its own normalized gradient (:func:`mmtoken.attention.grad.grad_p`, :func:`grad_v`), every start at once, through the compiled CPU kernel where it runs the loss (:func:`mmtoken.attention.fastpath.runs_loss`), in torch otherwise.
- :mod:`long_paths`: Long runs of paper A's theorem algorithms, shared by the chapters of Part I.
- :mod:`losses`: Losses of Assumption A (paper A): strictly decreasing, bounded derivative on bounded sets.
- :mod:`mirror`: The mirror map of mirror descent with the potential ``psi(p) = (1/q)||p||_q^q``, and its inverse.
- :mod:`model`: The attention model of paper A, batched over leading dimensions.
- :mod:`public_code`: A replica of paper A's public code: float32 autograd through the softmax, the way the figures were made.
- :mod:`random_batch`: Where normalized GD from ``p0 = 0`` goes on a batch of instances, and what the selection it reaches is.
- :mod:`recorder`: The record of a hand-written step loop: named values kept at the recorded steps, by the trainers' rule.
- :mod:`smoothness`: Smoothness of the attention loss ``L(p)``: the constant behind the step condition ``eta <= 1/L``.
- :mod:`svm`: Hard-margin SVM problems of paper A, solved with cvxpy (Clarabel) and checked independently.
- :mod:`svm_lq`: The l_q Att-SVM of mirror descent, solved with cvxpy and checked by its KKT conditions and a second solver.
- :mod:`svm_solvers`: The solvers behind the hard-margin SVMs of :mod:`mmtoken.attention.svm`: ``min ||x|| s.t. D x >= b``.
- :mod:`train`: Training loops: gradient descent, normalized GD, the Polyak step, mirror descent, regularization paths.

The names a reader uses are imported here (``from mmtoken.attention import att_svm, train_p``); the rest stays in
its module (``from mmtoken.attention import long_paths``). Importing this package loads torch and SciPy's
optimizers, not the compiled kernels (numba, on first use) nor matplotlib (:mod:`long_paths`).
"""

from mmtoken.attention.geometry import (
    SelectionReport,
    classify,
    correlation,
    enumerate_selections,
    optimal_tokens,
    svm_neighbours,
)
from mmtoken.attention.grad import Saturation, StableGrad, grad_p, loss_value, saturation
from mmtoken.attention.instances import Instance, counterexample, fig1, fig2, fig3, fig4, random_instances
from mmtoken.attention.joint import train_joint
from mmtoken.attention.losses import Loss, get_loss
from mmtoken.attention.model import AttentionProblem
from mmtoken.attention.recorder import Recorder
from mmtoken.attention.smoothness import smoothness_bound
from mmtoken.attention.svm import (
    InfeasibleSVM,
    SolverFailed,
    SVMSolution,
    att_svm,
    head_svm,
    relaxed_att_svm,
    w_svm,
)
from mmtoken.attention.svm_lq import LqSolution, lq_att_svm
from mmtoken.attention.train import History, best_of_starts, regularization_path, train_p

__all__ = [
    # the model, its losses and gradients
    "AttentionProblem",
    "Loss",
    "get_loss",
    "Saturation",
    "saturation",
    "StableGrad",
    "grad_p",
    "loss_value",
    "smoothness_bound",
    # the trainers and what they record
    "train_p",
    "train_joint",
    "History",
    "Recorder",
    "regularization_path",
    "best_of_starts",
    # the hard-margin problems
    "att_svm",
    "relaxed_att_svm",
    "head_svm",
    "w_svm",
    "lq_att_svm",
    "SVMSolution",
    "LqSolution",
    "InfeasibleSVM",
    "SolverFailed",
    # the geometry of a selection
    "correlation",
    "optimal_tokens",
    "svm_neighbours",
    "classify",
    "enumerate_selections",
    "SelectionReport",
    # the published instances
    "Instance",
    "fig1",
    "fig2",
    "fig3",
    "fig4",
    "counterexample",
    "random_instances",
]
