"""The record of a hand-written step loop: named values kept at the recorded steps, by the trainers' rule.

The package's trainers (:func:`mmtoken.attention.train.train_p`, :func:`mmtoken.attention.joint.train_joint`) record a
:class:`~mmtoken.attention.train.History`; a chapter that writes its own loop (another parameterisation, another
gradient) records with a :class:`Recorder`, which applies the same rule (:func:`~mmtoken.attention.train.record_steps`:
every ``record_every``-th step and the last) and the same stopping rule (``steps`` updates, the state after the
last one recorded, no update after it).
"""

from __future__ import annotations

__all__ = ["Recorder"]

import numpy as np
import torch

from mmtoken.attention.train import record_steps


class Recorder:
    """Named values of a loop of ``steps`` updates, kept at the steps :func:`~mmtoken.attention.train.record_steps`
    records (every ``record_every``-th and the last; ``None``: every step up to
    :data:`~mmtoken.attention.train.MAX_RECORDS` steps, a bounded thinned record beyond).

    A loop of ``steps`` updates passes through the states ``0, 1, ..., steps``. :meth:`keep` is called once per
    state with the values to record; it keeps a copy of them when the state is a recorded one, and returns whether
    an update follows (``False`` at the last state). So the loop is::

        rec = Recorder(steps, record_every)
        while rec.keep(W=W):  # W(0), ..., W(steps) offered, the recorded ones kept
            W = W - lr * direction(W)
        rec.steps, rec["W"]  # (S,) recorded step indices, (S, ...) the kept copies stacked

    and, where the update uses a value computed at the state (a gradient that also gives the loss),::

        while True:
            G, L = grad_and_loss(W)
            if not rec.keep(W=W, loss=L):
                break
            W = W - lr * G

    Parameters
    ----------
    steps : number of updates, a whole number ``>= 0`` (``0``: only the start is recorded).
    record_every : thinning of the record, a whole number ``>= 1``, or ``None``.

    Raises
    ------
    ValueError naming ``steps`` or ``record_every`` when it is not a valid count.
    """

    def __init__(self, steps: int, record_every: int | None = None):
        self._at = record_steps(steps, record_every)
        self.total = max(self._at)
        """The number of updates of the loop (``steps``)."""
        self._k = 0
        self._steps: list[int] = []
        self._rows: dict[str, list] = {}

    def keep(self, **values) -> bool:
        """Offer the values at the current state (tensors or arrays, by name); a copy of each is kept when the state
        is recorded. Returns ``True`` while an update follows, ``False`` at the last state.

        Every call names the same values; a call after the last state is an error (``RuntimeError``).
        """
        if self._k > self.total:
            raise RuntimeError(f"keep was called after the last of the {self.total} steps: the loop should have ended")
        if not values:
            raise ValueError("keep needs the values to record, by name (keep(W=W))")
        if self._k == 0:
            self._rows = {name: [] for name in values}
        elif values.keys() != self._rows.keys():
            raise ValueError(
                f"keep was given {sorted(values)} at step {self._k}, the record holds {sorted(self._rows)}"
            )
        if self._k in self._at:
            self._steps.append(self._k)
            for name, value in values.items():
                self._rows[name].append(_copy(value, name))
        self._k += 1
        return self._k <= self.total

    @property
    def steps(self) -> np.ndarray:
        """``(S,)`` the indices of the recorded states (``0`` is the start)."""
        return np.array(self._steps, dtype=np.int64)

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the recorded values."""
        return tuple(self._rows)

    def __getitem__(self, name: str) -> torch.Tensor | np.ndarray:
        """``(S, ...)``: the kept copies of value ``name`` stacked (a tensor on the values' device, or an array)."""
        if name not in self._rows:
            raise KeyError(f"no value {name!r} was recorded; the record holds {sorted(self._rows)}")
        rows = self._rows[name]  # never empty: the start (step 0) is always recorded
        return torch.stack(rows) if isinstance(rows[0], torch.Tensor) else np.stack(rows)

    def __repr__(self) -> str:
        return f"Recorder({len(self._steps)} of {len(self._at)} records kept, steps={self.total}, values={self.names})"


def _copy(value, name: str):
    """A copy of ``value`` that later updates cannot change: a detached tensor clone, or a NumPy array."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    out = np.array(value, copy=True)
    if out.dtype == object or not (np.issubdtype(out.dtype, np.number) or out.dtype == bool):
        raise ValueError(f"value {name!r} must be a tensor or a numeric array, got {type(value).__name__}")
    return out
