"""Stored outputs of chaotic training, compared with a tolerance: the text exactly, the numbers within bounds.

A trained network's last digits, and after a few epochs its second digit, move with the CPU that trained
it: the same code, seeds and package versions give ViT test accuracies 0.84 and 0.85 on an AMD EPYC and
an Intel Xeon, and the averaged map's effective patches 32 and 36 (chapter 9). No rounding grid survives
that (a value near a grid line lands on either side). So nbval compares the cells that print such results
(tagged :data:`TAG`) this way: the words, booleans, verdicts and layout must be the stored ones, and each
printed number may differ from the stored one by at most ``ATOL + RTOL * |stored|``.

The tolerance was set on 2026-12-02 from the largest spread measured between those two CPUs (chapter 9's
layer-0 averaged map, 36 against 32 effective patches, 12 %; chapter 12's control ||p|| 83.5 against 86.6,
3.6 %; validation accuracy one 0.05 grid step), before any other machine was tried, with about 1.7x room
for a third CPU. A claim's verdict is a word, so it never gets the tolerance: a claim that passes on one
CPU and fails on another fails the comparison.

Nothing here runs a notebook: the repository's ``conftest.py`` applies :func:`snap_outputs` (each stream and
each glued or displayed text, through :func:`snap`) to nbval's comparison of a tagged cell, and
``tests/test_from_wheel.py`` applies :func:`snap` to its own.
"""

from __future__ import annotations

import copy
import re

__all__ = ["ATOL", "RTOL", "TAG", "NUMBER", "within", "snap", "snap_outputs"]

TAG = "nbval-tolerance"
"""The cell tag that asks for this comparison (nbval's own ``nbval-ignore-output`` compares nothing)."""

RTOL = 0.2
"""Relative tolerance of a printed number against its stored value (see the module docstring)."""

ATOL = 0.05
"""Absolute tolerance: one step of the coarsest grid a chaotic accuracy is printed on (chapter 9's 0.05)."""

# A number is not part of a word ("A1", "x2"); a sign counts only where no digit or letter precedes it,
# so a range "10-12" is two numbers, 10 and 12.
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?")
_BLANKS = re.compile(r"[ \t]+")


def within(test: float, stored: float, rtol: float = RTOL, atol: float = ATOL) -> bool:
    """Whether ``test`` lies within ``atol + rtol * |stored|`` of ``stored``."""
    return abs(test - stored) <= atol + rtol * abs(stored)


def _pieces(text: str) -> tuple[list[str], list[str]]:
    """The text between the numbers (blank runs collapsed to one space: a wider number shifts a table's
    columns) and the numbers as printed."""
    numbers = NUMBER.findall(text)
    words = [_BLANKS.sub(" ", w) for w in NUMBER.split(text)]
    return words, numbers


def snap(stored: str, test: str, rtol: float = RTOL, atol: float = ATOL) -> str:
    """``test`` rewritten on ``stored``'s layout, each number within tolerance of its stored one printed as
    stored, every other number as computed; ``test`` unchanged when its words differ from ``stored``'s.

    The result equals ``stored`` exactly when the two agree up to the tolerance, and otherwise differs
    from it only where they disagree, so nbval's diff shows the numbers out of tolerance.

    Parameters
    ----------
    stored, test : str
        The stored output and the output of the fresh run.
    rtol, atol : float
        The tolerance, :func:`within`'s.
    """
    if rtol < 0 or atol < 0:
        raise ValueError(f"rtol and atol must be >= 0, got rtol={rtol}, atol={atol}")
    stored_words, stored_numbers = _pieces(stored)
    test_words, test_numbers = _pieces(test)
    if stored_words != test_words or len(stored_numbers) != len(test_numbers):
        return test
    layout = NUMBER.split(stored)
    out = [layout[0]]
    for k, (s, t) in enumerate(zip(stored_numbers, test_numbers)):
        out.append(s if within(float(t), float(s), rtol, atol) else t)
        out.append(layout[k + 1])
    return "".join(out)


def snap_outputs(stored: list[dict], test: list[dict], rtol: float = RTOL, atol: float = ATOL) -> list[dict]:
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
                    merged["data"][key] = snap(ref[key], value, rtol, atol)
            out.append(merged)
        elif o.get("output_type") != "stream":
            out.append(o)
        elif o["name"] not in done:
            done.add(o["name"])
            merged = copy.copy(o)
            merged["text"] = snap(stored_text.get(o["name"], ""), test_text[o["name"]], rtol, atol)
            out.append(merged)
    return out
