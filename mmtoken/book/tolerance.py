"""Stored outputs of chaotic training, compared with a tolerance: the text exactly, the numbers within bounds.

A trained network's last digits, and after a few epochs its second digit, move with the CPU that trained
it: the same code, seeds and package versions give ViT test accuracies 0.84 and 0.85 on an AMD EPYC and an
Intel Xeon, and 32 and 36 effective patches (chapter 9); no rounding grid survives that. So nbval compares
the cells that print such results (tagged :data:`TAG`) this way: the words, booleans, verdicts and layout
must be the stored ones, and each printed number may differ from the stored one by at most ``ULPS`` units
of its last printed digit plus ``RTOL * |stored|``: 0.05 + 20 % for an accuracy printed as ``0.85``,
0.5 + 20 % for a growth printed as ``16.5`` (one step of its 0.5 grid). A claim's verdict is a word, so it
never gets the tolerance: a claim that passes on one CPU and fails on another fails the comparison.

Set on 2026-12-02 from measured spreads: ``RTOL`` from the spread between those two CPUs (36 against 32
effective patches, 12 %; chapter 12's control ||p|| 83.5 against 86.6); then a run on the AMD EPYC under
ATen's default kernels (no AVX) moved values printed on a grid by one grid step (a growth 1.5 against 2.0,
per-image effective patches 18 against 14, 22 %), so the absolute part, first a fixed 0.05, became one
step of the coarsest grid (``ULPS``). The collapsed control's accuracy (0.53 against 0.85) stays out.

Nothing here runs a notebook: the repository's ``conftest.py`` applies :func:`snap_outputs` to nbval's
comparison of a tagged cell, and ``tests/test_from_wheel.py`` applies :func:`snap` to its own.
"""

from __future__ import annotations

import copy
import re

__all__ = ["ULPS", "RTOL", "TAG", "NUMBER", "last_digit", "within", "snap", "snap_outputs"]

TAG = "nbval-tolerance"
"""The cell tag that asks for this comparison (nbval's own ``nbval-ignore-output`` compares nothing)."""

RTOL = 0.2
"""Relative tolerance of a printed number against its stored value (see the module docstring)."""

ULPS = 5
"""Absolute tolerance, in units of the stored number's last printed digit: one step of the coarsest grid the
book prints trained results on (0.5 for a number printed with one decimal)."""

# A number is not part of a word ("A1", "x2"); a sign counts only where no digit or letter precedes it,
# so a range "10-12" is two numbers, 10 and 12.
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_BLANKS = re.compile(r"\s+")


def last_digit(printed: str) -> float:
    """The value of one unit in the last digit of a number as printed: ``"0.85"`` -> 0.01, ``"18"`` -> 1,
    ``"1e-06"`` -> 1e-06, ``"2.5e-3"`` -> 1e-4."""
    mantissa, _, exponent = printed.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    return 10.0 ** (int(exponent or 0) - decimals)


def within(test: str, stored: str, rtol: float = RTOL, ulps: float = ULPS) -> bool:
    """Whether the printed number ``test`` lies within ``ulps`` units of ``stored``'s last digit plus
    ``rtol * |stored|`` of the printed number ``stored``."""
    t, s = float(test), float(stored)
    return abs(t - s) <= ulps * last_digit(stored) + rtol * abs(s)


def _pieces(text: str) -> tuple[list[str], list[str]]:
    """The text between the numbers (runs of white space, line breaks included, collapsed to one space: a
    wider number shifts a table's columns, or a wrapped line's break) and the numbers as printed."""
    return [_BLANKS.sub(" ", w) for w in NUMBER.split(text)], NUMBER.findall(text)


def snap(stored: str, test: str, rtol: float = RTOL, ulps: float = ULPS) -> str:
    """``test`` rewritten on ``stored``'s layout, each number within tolerance of its stored one printed as
    stored, every other number as computed; ``test`` unchanged when its words differ from ``stored``'s.

    The result equals ``stored`` exactly when the two agree up to the tolerance, and otherwise differs
    from it only where they disagree, so nbval's diff shows the numbers out of tolerance.

    Parameters
    ----------
    stored, test : str
        The stored output and the output of the fresh run.
    rtol, ulps : float
        The tolerance, :func:`within`'s.
    """
    if rtol < 0 or ulps < 0:
        raise ValueError(f"rtol and ulps must be >= 0, got rtol={rtol}, ulps={ulps}")
    stored_words, stored_numbers = _pieces(stored)
    test_words, test_numbers = _pieces(test)
    if stored_words != test_words or len(stored_numbers) != len(test_numbers):
        return test
    layout = NUMBER.split(stored)
    snapped = [s if within(t, s, rtol, ulps) else t for s, t in zip(stored_numbers, test_numbers)]
    return layout[0] + "".join(n + rest for n, rest in zip(snapped, layout[1:]))


def snap_outputs(stored: list[dict], test: list[dict], rtol: float = RTOL, ulps: float = ULPS) -> list[dict]:
    """A cell's fresh outputs with :func:`snap` applied to each text it holds: each stream against the stored
    stream of its name (stdout with stdout, in order), and each text of a rich output (``text/plain``, a
    glued value's ``application/papermill.record/text/plain``) against the same key of the stored rich output
    at the same position; other outputs and keys are returned as they are.

    Parameters
    ----------
    stored, test : list of dict
        nbformat outputs: the stored cell's and the fresh run's.
    """

    def streams(outputs):
        text: dict[str, str] = {}
        for o in outputs:
            if o.get("output_type") == "stream":
                text[o["name"]] = text.get(o["name"], "") + o["text"]
        return text

    stored_text, test_text = streams(stored), streams(test)
    stored_rich = [o for o in stored if "data" in o]
    out, done, k = [], set(), 0
    for o in test:
        if "data" in o:
            ref = stored_rich[k].get("data", {}) if k < len(stored_rich) else {}
            k += 1
            merged = copy.copy(o)  # keeps nbformat's node type: nbval reads attributes
            merged["data"] = copy.copy(o["data"])
            for key, value in o["data"].items():
                if isinstance(value, str) and isinstance(ref.get(key), str) and not key.startswith("image/"):
                    merged["data"][key] = snap(ref[key], value, rtol, ulps)
            out.append(merged)
        elif o.get("output_type") != "stream":
            out.append(o)
        elif o["name"] not in done:
            done.add(o["name"])
            merged = copy.copy(o)
            merged["text"] = snap(stored_text.get(o["name"], ""), test_text[o["name"]], rtol, ulps)
            out.append(merged)
    return out
