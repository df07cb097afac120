"""Argument checks shared by the public functions: one clear error naming the argument.

Entry points accept what a reader types (lists, NumPy arrays, torch tensors, Python numbers); these
helpers return the expected type or raise :class:`ValueError` naming the argument and what was expected.
Nothing is silently truncated (complex numbers, fractional counts or selections).

The chapters' ``Settings`` are checked by the rules of :mod:`mmtoken.rules` (``validate.fields`` in
``__post_init__``), re-exported here so that a chapter imports one module for its checks.
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from mmtoken import rules
from mmtoken.rules import (  # noqa: F401 (re-exported: the Settings' checks)
    FieldTypeError,
    Rule,
    boolean,
    choice,
    fields,
    instance_size,
    integer,
    optional,
    points,
    real,
    relation,
    rules_of,
    satisfies,
    sequence,
    text,
    tuple_of,
)

__all__ = [
    "numeric",
    "real_array",
    "count",
    "positive",
    "nonnegative",
    "selection",
    "mask",
    "real_number",
    "flag",
    "batch_shape",
    *rules.__all__,  # the Settings' checks, re-exported
]


def numeric(x, name: str) -> np.ndarray:
    """A NumPy view of ``x`` (torch tensors are moved to the CPU), refusing what is not real numbers."""
    if hasattr(x, "detach"):  # torch tensor
        if x.is_complex():
            raise ValueError(f"{name} must be real, got a complex tensor")
        if x.device.type == "meta":
            raise ValueError(f"{name} is a meta-device tensor: it has a shape but no values")
        x = x.detach().cpu()
        try:
            x = x.numpy()
        except TypeError:  # bfloat16 and other dtypes NumPy lacks: widen first (exact)
            x = x.double().numpy()
    if isinstance(x, (str, bytes)) or x is None:
        raise ValueError(f"{name} must be numeric, got {type(x).__name__}")
    try:
        a = np.asarray(x)
    except (ValueError, TypeError) as exc:  # ragged nested lists
        raise ValueError(f"{name} must be a rectangular numeric array ({exc})") from None
    if np.iscomplexobj(a):
        raise ValueError(f"{name} must be real, got complex values")
    if a.dtype == object or a.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be numeric, got dtype {a.dtype}")
    return a


def real_array(x, name: str, ndim: int | None = None, min_ndim: int | None = None) -> np.ndarray:
    """``x`` as a finite float64 array; ``ndim`` / ``min_ndim`` constrain its rank."""
    a = numeric(x, name).astype(np.float64)
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimension(s), got shape {a.shape}")
    if min_ndim is not None and a.ndim < min_ndim:
        raise ValueError(f"{name} must have at least {min_ndim} dimensions, got shape {a.shape}")
    if not np.isfinite(a).all():
        raise ValueError(f"{name} contains NaN or infinite values")
    return a


def _scalar(x):
    """Unwrap a 0-d array or tensor into a Python number (other values are returned as they are)."""
    if getattr(x, "ndim", None) == 0 and not isinstance(x, np.generic):
        try:
            return x.item()
        except (AttributeError, ValueError):
            return x
    return x


def count(x, name: str, minimum: int = 0) -> int:
    """A whole number ``>= minimum`` (an integral float such as ``1e3`` is accepted; ``True`` is not)."""
    x = _scalar(x)
    if (
        isinstance(x, (bool, np.bool_))
        or not isinstance(x, numbers.Real)
        or not (isinstance(x, numbers.Integral) or (math.isfinite(float(x)) and float(x).is_integer()))
    ):
        raise ValueError(f"{name} must be an integer >= {minimum}, got {x!r}")
    value = int(x)
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return value


def positive(x, name: str, maximum: float | None = None) -> float:
    """A finite real number ``> 0`` (and ``<= maximum`` if given)."""
    x = _scalar(x)
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        raise ValueError(f"{name} must be a positive finite number, got {x!r}")
    value = float(x)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be at most {maximum}, got {value!r}")
    return value


def nonnegative(x, name: str) -> float:
    """A finite real number ``>= 0``."""
    x = _scalar(x)
    is_real = isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))
    if not (is_real and math.isfinite(float(x)) and float(x) >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {x!r}")
    return float(x)


def real_number(x, name: str) -> float:
    """A finite real number (``True`` / ``False`` and strings are refused)."""
    x = _scalar(x)
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real) or not math.isfinite(float(x)):
        raise ValueError(f"{name} must be a finite real number, got {x!r}")
    return float(x)


def flag(x, name: str) -> bool:
    """A boolean: ``True`` / ``False`` (NumPy booleans too); ``"no"``, ``0``, ``None`` are refused, not read as truth values."""
    x = _scalar(x)
    if not isinstance(x, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {x!r}")
    return bool(x)


def selection(alpha, n: int, T: int, name: str = "alpha") -> np.ndarray:
    """A selection: ``(n,)`` integers in ``0..T-1`` (integral floats accepted, fractions refused)."""
    a = numeric(alpha, name)
    if a.dtype.kind == "b":
        raise ValueError(f"{name} must hold token indices, got booleans")
    if a.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},) (one token per input), got {a.shape}")
    if a.dtype.kind == "f":
        if not np.isfinite(a).all() or not (a == np.round(a)).all():
            raise ValueError(f"{name} must hold integer token indices, got {a.tolist()}")
    a = a.astype(np.int64)
    if n and (a.min() < 0 or a.max() >= T):
        raise ValueError(f"{name} must index tokens 0..{T - 1}, got {a.tolist()}")
    return a


def mask(m, shape: tuple, name: str = "mask") -> np.ndarray:
    """A boolean mask of ``shape`` (0/1 numbers accepted; any other value refused)."""
    a = numeric(m, name)
    if a.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {a.shape}")
    if a.dtype.kind != "b" and not np.isin(a, (0, 1)).all():
        raise ValueError(f"{name} must be boolean (True at real tokens), got values other than 0/1")
    return a.astype(bool)


def batch_shape(*shapes) -> tuple[int, ...]:
    """The broadcast of ``shapes`` (tuples or ``torch.Size``), or ``ValueError`` when they do not broadcast.

    NumPy's rule, which is torch's; ``torch.broadcast_shapes`` would import sympy (0.2-1 s) on its first call.
    Wrap the result in ``torch.Size`` where a tensor method needs one.
    """
    return np.broadcast_shapes(*(tuple(s) for s in shapes))
