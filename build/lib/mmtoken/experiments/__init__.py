"""One module per chapter: ``run(scale)``, its plots (``FIGURES``) and its claims.

Every module in this package is imported by :func:`load_all`, which is what
``python -m mmtoken claims`` and ``python -m mmtoken figures`` call; there is
no list to keep up to date. Which module belongs to which chapter (claim ids
start with the prefix):

========================  ==================================  ==============================
module                    chapter                             claim prefix
========================  ==================================  ==============================
``tour``                  ``book/tour`` (a quick tour)        ``core.``
``w_equals_p``            1 ``part1/01_model``                ``A.model.``
``global_convergence``    2 ``part1/02_global``               ``A.global.``
``local_convergence``     3 ``part1/03_local``                ``A.local.``
``many_inputs``           4 ``part1/04_inputs``               ``A.inputs.``
``joint``                 5 ``part1/05_joint``                ``A.joint.``
``nonlinear_head``        6 ``part1/06_nonlinear``            ``A.nonlinear.``
``loss_shapes``           7 ``part1/07_losses``               ``A.losses.``
``random_instances``      8 ``part1/08_random``               ``A.random.``
``vit_sparsity``          9 ``part1/09_vit_sparsity``         ``A.vit.``
``vit_tuning``            9 (the recipe chosen on validation)
``one_step``              10 ``part2/10_one_step``            ``B.one_step.``
``cls_margin``            11 ``part2/11_cls_margin``          ``B.cls.``, ``B.synthetic.``
``real_reviews``          12 ``part2/12_real_reviews``        ``B.<data>.``
``saturation``            appendix ``appendix/saturation``    ``A.numerics.``
========================  ==================================  ==============================

The package modules behind them: paper A's selection core (``model``, ``grad``,
``train``, ``svm``, ``geometry``, ``cone_path``, ``joint_path``), paper B's
embeddings (``embedding``, ``synthetic``, ``corpus_stats``) and reviews
(``review_model``, ``review_phase_two``, ``review_runs``, ``review_search``,
``review_regime``), the ViT (``vit``, ``vit_runs``) and the data
(``datasets``); see :mod:`mmtoken`.
"""

from __future__ import annotations

__all__ = ["modules", "load_all"]

import importlib
import pkgutil
from types import ModuleType


def modules() -> list[str]:
    """Names of the experiment modules, sorted."""
    return sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def load_all() -> dict[str, ModuleType]:
    """Import every experiment module (registering its claims)."""
    return {name: importlib.import_module(f"{__name__}.{name}") for name in modules()}
