"""The rules of the chapters' ``Settings``: every field checked at construction, by name, before any computing.

A chapter's frozen ``Settings`` dataclass calls :func:`fields` in its ``__post_init__`` with a :class:`Rule`
for each field that its annotation does not describe, and :func:`relation` for each relation between fields::

    def __post_init__(self):
        validate.fields(self, {"steps every": validate.integer(1), "lr": validate.real(above=0)})
        validate.relation(self, "every", self.every <= self.steps, f"at most steps ({self.steps})")

A bad value raises an error naming the class, the field and what it accepts (``Settings.steps must be an
integer >= 1, got 0``); a good one is stored normalised (lists as tuples, NumPy numbers as Python ones), so that
equal settings hash, compare and key the store alike whatever the reader typed. The names are re-exported by
:mod:`mmtoken.validate`, the chapters' one import for checks.
"""

from __future__ import annotations

__all__ = [
    "FieldTypeError",
    "Rule",
    "integer",
    "real",
    "boolean",
    "choice",
    "text",
    "sequence",
    "tuple_of",
    "instance_size",
    "points",
    "optional",
    "satisfies",
    "fields",
    "relation",
    "rules_of",
]

import dataclasses
import math
import numbers
import weakref
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass, field

import numpy as np


class FieldTypeError(TypeError, ValueError):
    """A value of the wrong type (a float for an integer, ``"no"`` for a boolean).

    A :class:`TypeError`, and a :class:`ValueError` for the callers that catch every bad value as one.
    """


@dataclass(frozen=True)
class Rule:
    """What one ``Settings`` field accepts, and how it is stored (an ``int``, a ``float``, a ``tuple``).

    Built by :func:`integer`, :func:`real`, :func:`boolean`, :func:`choice`, :func:`text`, :func:`sequence`,
    :func:`tuple_of`, :func:`instance_size`, :func:`points`, :func:`optional` and :func:`satisfies`; applied
    by :func:`fields` (the tests read it too, to derive a wrong value of each kind).

    Attributes
    ----------
    kind : str
        ``"integer"``, ``"real"``, ``"boolean"``, ``"choice"``, ``"text"``, ``"sequence"``, ``"optional"`` or
        ``"custom"``.
    low, high : float or None
        Bounds of a number (``None``: none); ``low_open`` / ``high_open`` exclude them.
    options : tuple
        The values of a choice.
    item : Rule or None
        The rule of every item of a sequence, or of an optional's value.
    items : tuple of Rule
        One rule per position of a fixed-length tuple (:func:`tuple_of`).
    min_length, max_length : int, int or None
        A sequence's length (equal: exactly that length).
    distinct, scalar : bool
        A sequence's items differ; a single value is accepted as a sequence of one.
    test : callable or None
        A custom rule's check (raises on a bad value).
    what : str
        What the rule accepts, in words (default: said from the other attributes).
    """

    kind: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    options: tuple = ()
    item: Rule | None = None
    items: tuple = ()
    min_length: int = 0
    max_length: int | None = None
    distinct: bool = False
    scalar: bool = False
    test: Callable | None = field(default=None, compare=False)
    what: str = ""

    def describe(self) -> str:
        """What the rule accepts, in words: ``"an integer >= 1"``, ``"a finite number in (0, 1)"``, ..."""
        if self.what:
            return self.what
        if self.kind in ("integer", "real"):
            noun = "an integer" if self.kind == "integer" else "a finite number"
            if self.low is not None and self.high is not None:
                left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
                return f"{noun} in {left}{self.low:g}, {self.high:g}{right}"
            if self.low is not None:
                return f"{noun} {'>' if self.low_open else '>='} {self.low:g}"
            if self.high is not None:
                return f"{noun} {'<' if self.high_open else '<='} {self.high:g}"
            return noun
        if self.kind == "optional":
            return f"None or {self.item.describe()}"
        if self.kind == "choice":
            return "one of " + ", ".join(map(repr, self.options))
        if self.kind in ("boolean", "text"):
            return "True or False" if self.kind == "boolean" else "a string"
        lo, hi, items = self.min_length, self.max_length, "distinct items" if self.distinct else "items"
        if lo == hi:
            size = f"a tuple of {lo} {items if lo != 1 else items[:-1]}"
        elif hi is not None:
            size = f"a tuple of {lo} to {hi} {items}"
        elif lo > 1:
            size = f"a tuple of at least {lo} {items}"
        else:
            size = ("a non-empty tuple" if lo else "a tuple") + (" of distinct items" if self.distinct else "")
        return size + (f", each {self.item.describe()}" if self.item is not None else "")

    def check(self, value, name: str):
        """``value`` as stored (normalised).

        Raises
        ------
        FieldTypeError
            ``value`` has the wrong type; the message names ``name`` and says what the rule accepts.
        ValueError
            ``value`` is out of range, of the wrong length or not one of the options (the same message).
        """
        x = _unwrap(value)
        if self.kind == "optional":
            try:
                return None if x is None else self.item.check(x, name)
            except FieldTypeError:
                raise FieldTypeError(self._refusal(name, value)) from None
            except ValueError:
                raise ValueError(self._refusal(name, value)) from None
        if self.kind in ("integer", "real"):
            number = numbers.Integral if self.kind == "integer" else numbers.Real
            if isinstance(x, (bool, np.bool_)) or not isinstance(x, number):
                raise FieldTypeError(self._refusal(name, value))
            x = int(x) if self.kind == "integer" else float(x)
            below = self.low is not None and (x <= self.low if self.low_open else x < self.low)
            above = self.high is not None and (x >= self.high if self.high_open else x > self.high)
            if below or above or not math.isfinite(x):
                raise ValueError(self._refusal(name, value))
            return x
        if self.kind in ("boolean", "text"):
            if not isinstance(x, (bool, np.bool_) if self.kind == "boolean" else str):
                raise FieldTypeError(self._refusal(name, value))
            return bool(x) if self.kind == "boolean" else x
        if self.kind == "choice":
            if not any(x is o or (type(x) is type(o) and x == o) for o in self.options):
                raise ValueError(self._refusal(name, value))
            return x
        if self.kind == "custom":
            try:
                self.test(x)
            except (ValueError, TypeError, KeyError) as exc:
                raise ValueError(f"{self._refusal(name, value)} ({exc})") from None
            return x
        return self._sequence(x, name)

    def _sequence(self, x, name: str) -> tuple:
        if self.scalar and (isinstance(x, (str, numbers.Number)) or not isinstance(x, Iterable)):
            return (self.item.check(x, name),) if self.item is not None else (x,)  # one value: a tuple of one
        if isinstance(x, (str, bytes, Mapping, Set)) or not isinstance(x, Iterable):
            raise FieldTypeError(self._refusal(name, x))
        items = tuple(x)
        if len(items) < self.min_length or (self.max_length is not None and len(items) > self.max_length):
            raise ValueError(self._refusal(name, x))
        rules = [self.item] * len(items) if self.item is not None else self.items or [None] * len(items)
        items = tuple(v if r is None else r.check(v, f"{name}[{i}]") for i, (r, v) in enumerate(zip(rules, items)))
        if self.distinct and len(set(items)) < len(items):
            raise ValueError(self._refusal(name, x))
        return items

    def _refusal(self, name: str, value) -> str:
        shown = repr(value.tolist() if isinstance(value, np.ndarray) else value)
        return f"{name} must be {self.describe()}, got {shown if len(shown) <= 80 else shown[:77] + '...'}"


def _unwrap(x):
    """A 0-d array or tensor as a Python number (anything else as it is)."""
    if getattr(x, "ndim", None) == 0 and not isinstance(x, np.generic):
        try:
            return x.item()
        except (AttributeError, ValueError):
            return x
    return x


# ----------------------------------------------------------------------------- the rules
def integer(low: int | None = 0, high: int | None = None) -> Rule:
    """A whole number (``int`` or NumPy's; not a float, not a boolean) in ``[low, high]`` (``None``: unbounded)."""
    return Rule("integer", low, high)


def real(above=None, *, at_least=None, below=None, at_most=None) -> Rule:
    """A finite real number (an ``int`` is stored as ``float``; a boolean is refused) within the bounds given.

    Parameters
    ----------
    above, at_least : float, optional
        The lower bound, excluded or included (give at most one).
    below, at_most : float, optional
        The upper bound, excluded or included (give at most one). ``real(above=0, below=1)``: ``(0, 1)``.
    """
    if above is not None and at_least is not None or below is not None and at_most is not None:
        raise ValueError("give one lower bound (above or at_least) and one upper bound (below or at_most)")
    low, high = (above if above is not None else at_least), (below if below is not None else at_most)
    return Rule("real", low, high, low_open=above is not None, high_open=below is not None)


def boolean() -> Rule:
    """``True`` or ``False`` (NumPy's too); ``"no"``, ``0`` and ``None`` are refused, not read as truth values."""
    return Rule("boolean")


def choice(*options) -> Rule:
    """One of ``options``, compared with its type (``1`` is not ``True``)."""
    return Rule("choice", options=options)


def text() -> Rule:
    """Any string."""
    return Rule("text")


def sequence(item: Rule | None = None, *, length=None, min_length=1, max_length=None, distinct=False, scalar=False):
    """A tuple (a list, an array or any ordered iterable is stored as one) whose items follow ``item``.

    Parameters
    ----------
    item : Rule, optional
        The rule of every item (``None``: items kept as given).
    length : int, optional
        The exact length; otherwise at least ``min_length`` (default 1) and at most ``max_length`` items.
    distinct : bool
        No repeated items.
    scalar : bool
        A single value is accepted as a tuple of one (``d=20`` for ``d=(20,)``).
    """
    lo, hi = (length, length) if length is not None else (min_length, max_length)
    return Rule("sequence", item=item, min_length=lo, max_length=hi, distinct=distinct, scalar=scalar)


def tuple_of(*rules: Rule, what: str = "") -> Rule:
    """A tuple of ``len(rules)`` items, the ``i``-th following ``rules[i]`` (``what``: the tuple in words)."""
    what = what or f"a tuple of {len(rules)} items: " + "; ".join(r.describe() for r in rules)
    return Rule("sequence", items=rules, min_length=len(rules), max_length=len(rules), what=what)


def instance_size() -> Rule:
    """The size ``(n, T, d)`` of an attention instance: ``n >= 1`` inputs, ``T >= 2`` tokens, ``d >= 1``."""
    return tuple_of(integer(1), integer(2), integer(1), what="a size (n, T, d) with n >= 1, T >= 2, d >= 1")


def points(dim: int = 2) -> Rule:
    """A non-empty tuple of points, each ``dim`` finite numbers (a list of lists, or an array ``(S, dim)``)."""
    point = Rule("sequence", item=real(), min_length=dim, max_length=dim, what=f"a point of {dim} finite numbers")
    return Rule("sequence", item=point, min_length=1, what=f"a non-empty tuple of points of {dim} finite numbers")


def optional(rule: Rule) -> Rule:
    """``None`` or what ``rule`` accepts."""
    return Rule("optional", item=rule)


def satisfies(test: Callable, what: str) -> Rule:
    """A value that ``test(value)`` accepts, kept as given; a ``ValueError``, ``TypeError`` or ``KeyError`` refuses it.

    ``what`` says what is accepted (``"a loss of mmtoken.attention.losses (a name or a Loss)"``).
    """
    return Rule("custom", test=test, what=what)


# ----------------------------------------------------------------------------- applying them
_BY_ANNOTATION = {"int": integer(), "float": real(), "bool": boolean(), "str": text()}
_TABLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # class -> {field: Rule}, for rules_of


def fields(settings, rules: dict[str, Rule] | None = None) -> None:
    """Check and normalise every field of the frozen dataclass ``settings``; call it from ``__post_init__``.

    Parameters
    ----------
    settings : a frozen dataclass instance
        Its fields are replaced by their normalised values.
    rules : dict of str to Rule
        The rule of each field named (several at once, separated by spaces: ``"steps plain_steps"``). A field
        not named follows its annotation: ``int`` an :func:`integer` ``>= 0``, ``float`` a :func:`real`,
        ``bool`` a :func:`boolean`, ``str`` a :func:`text`; any other field must be named.

    Raises
    ------
    FieldTypeError
        A value of the wrong type (a ``TypeError`` and a ``ValueError``).
    ValueError
        A value out of range or of the wrong length. Both name the class and the field and say what it
        accepts: ``Settings.steps must be an integer >= 1, got 0``.
    TypeError
        A field with no rule, or a rule for no field: the class's mistake, not the reader's.
    """
    cls = type(settings)
    table = _table(cls, rules or {})
    for f in dataclasses.fields(settings):
        value = table[f.name].check(getattr(settings, f.name), f"{cls.__name__}.{f.name}")
        object.__setattr__(settings, f.name, value)


def _table(cls, rules: dict[str, Rule]) -> dict[str, Rule]:
    named = {name: rule for names, rule in rules.items() for name in names.split()}
    declared = {f.name: f for f in dataclasses.fields(cls)}
    if unknown := sorted(set(named) - set(declared)):
        raise TypeError(f"{cls.__name__} has no field {', '.join(unknown)} (named in its rules)")
    table = {}
    for name, f in declared.items():
        annotation = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", "")
        rule = named.get(name) or _BY_ANNOTATION.get(annotation)
        if rule is None:
            raise TypeError(f"{cls.__name__}.{name} ({f.type}) needs a rule in validate.fields")
        table[name] = rule
    _TABLES[cls] = table
    return table


def relation(settings, name: str, holds: bool, what: str) -> None:
    """Refuse ``settings`` unless ``holds``, a relation between fields, with a ``ValueError`` naming ``name``.

    Examples
    --------
    ``relation(self, "every", self.every <= self.steps, f"at most steps ({self.steps})")`` raises
    ``Settings.every must be at most steps (1000), got 5000``.
    """
    if not holds:
        raise ValueError(f"{type(settings).__name__}.{name} must be {what}, got {getattr(settings, name)!r}")


def rules_of(cls) -> dict[str, Rule]:
    """The rule of every field of the ``Settings`` class ``cls``, as :func:`fields` applies them."""
    if cls not in _TABLES:
        cls()  # the defaults construct, and record the table
    return dict(_TABLES[cls])
