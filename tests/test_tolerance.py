"""Cells of chaotic training compared with a tolerance (``mmtoken.book.tolerance``, the ``nbval-tolerance`` tag).

The pairs below are real: the stored output (trained on an AMD EPYC) against CI's fresh run of the same
commit on an Intel Xeon, from CI's log of 2026-12-02. The tolerance must accept them and reject the
nearest wrong answers: a collapsed model's accuracy, a flipped comparison, a changed verdict, a lost line.
The last tests run nbval itself on a scratch notebook, so the wrapper in ``conftest.py`` is what is tested.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from mmtoken.book import tolerance

ROOT = Path(__file__).resolve().parents[1]

# (stored on AMD EPYC, fresh on Intel Xeon): chapter 12 cell 22, chapter 9 cells 15, 24 and 47
MEASURED = [
    ("         86.583   78.445   78.395   87.923   80.420\n", "         83.513   80.045   78.395   89.351   80.420\n"),
    (
        "seed 10: test accuracy 0.85; validation accuracy by epoch:\n"
        "    0.75, 0.80, 0.80, 0.80, 0.85, 0.85, 0.85, 0.85, 0.85\nseed 11: test accuracy 0.85\n",
        "seed 10: test accuracy 0.85; validation accuracy by epoch:\n"
        "    0.70, 0.80, 0.80, 0.85, 0.85, 0.85, 0.85, 0.85, 0.85\nseed 11: test accuracy 0.84\n",
    ),
    (
        "10    16.5  2.0  2.5  2.0  8.0    2.0     1.5\n12    19.0\n",
        "10    16.0  2.0  2.5  2.0  7.5    2.0     1.5\n12    18.0\n",
    ),
    (
        "seed\n10    16.0  2.0   9.5      18      30      False          False\n"
        "12    16.5  2.0   8.5      22      32      False          False\n",
        "seed\n10    16.0  2.0  10.0      18      30      False          False\n"
        "12    16.0  2.0   9.5      22      36      False          False\n",
    ),
    ("18 .845 .850 .856\n", "18 .845 .849 .856\n"),
]


@pytest.mark.parametrize("stored, fresh", MEASURED)
def test_the_measured_cross_cpu_spread_is_within_tolerance(stored, fresh):
    assert fresh != stored
    assert tolerance.snap(stored, fresh) == stored


@pytest.mark.parametrize(
    "fresh, why",
    [
        ("seed 11: test accuracy 0.53\n", "a collapsed model (chapter 9's control sits at 0.53)"),
        ("seed 11: test accuracy 0.85 (collapsed)\n", "a word added"),
        ("seed 11: train accuracy 0.85\n", "another quantity"),
        ("", "the line lost"),
    ],
)
def test_a_wrong_run_is_not_within_tolerance(fresh, why):
    stored = "seed 11: test accuracy 0.85\n"
    assert tolerance.snap(stored, fresh) != stored, why


def test_a_flipped_verdict_or_comparison_fails():
    stored = "known miss A.vit.learns (observation)\n  worst = 0.85\n10  16.0  False\n"
    assert tolerance.snap(stored, stored.replace("known miss", "pass")) != stored
    assert tolerance.snap(stored, stored.replace("False", "True")) != stored


def test_only_the_numbers_out_of_tolerance_differ():
    stored = "a 10.0 b 0.85 c 100\n"
    assert tolerance.snap(stored, "a 10.5 b 0.40 c 90\n") == "a 10.0 b 0.40 c 100\n"


def test_numbers_are_read_as_printed():
    # a range is two numbers, a name keeps its digit, scientific notation is one number
    assert tolerance.NUMBER.findall("seeds 10-12, A1, 1e-06, -0.5, .849") == ["10", "12", "1e-06", "-0.5", ".849"]


def test_the_bound_is_ulps_of_the_last_digit_plus_rtol_times_the_stored_value():
    assert [tolerance.last_digit(x) for x in ("0.85", "18", "16.5", ".849", "1e-06", "2.5e-3")] == pytest.approx(
        [0.01, 1, 0.1, 0.001, 1e-6, 1e-4]
    )
    bound = tolerance.ULPS * 0.01 + tolerance.RTOL * 1.0  # for a stored "1.00"
    assert tolerance.within(f"{1.0 + bound - 1e-9:.10f}", "1.00")
    assert not tolerance.within(f"{1.0 + bound + 1e-9:.10f}", "1.00")
    with pytest.raises(ValueError, match="rtol"):
        tolerance.snap("1", "1", rtol=-1)


# (stored, fresh) measured on the AMD EPYC itself, default kernels against ATEN_CPU_CAPABILITY=default (chapter 9):
# a value printed on a grid moves by one grid step
GRID_STEPS = [("growth = 1.5\n", "growth = 2.0\n"), ("6  0.5    5.0 8\n", "6  1.0    5.0 8\n"), ("18 30\n", "14 30\n")]


@pytest.mark.parametrize("stored, fresh", GRID_STEPS)
def test_one_grid_step_is_within_tolerance(stored, fresh):
    assert tolerance.snap(stored, fresh) == stored


def _run_nbval(tmp_name: str, stored: str, tags: list[str]) -> subprocess.CompletedProcess:
    # under the repository (its conftest.py is the code under test), in the ignored build folder
    folder = ROOT / "_build" / "tolerance_test"
    folder.mkdir(parents=True, exist_ok=True)
    cell = nbformat.v4.new_code_cell("print('seed 11: test accuracy', 0.85)", metadata={"tags": tags})
    cell.execution_count = 1
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=stored)]
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = folder / f"{tmp_name}.ipynb"
    path.write_text(json.dumps(nb))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    "stored, tags, passes",
    [
        ("seed 11: test accuracy 0.84\n", [tolerance.TAG], True),  # within tolerance
        ("seed 11: test accuracy 0.84\n", [], False),  # untagged: exact, as nbval is
        ("seed 11: test accuracy 0.53\n", [tolerance.TAG], False),  # the collapsed model
    ],
)
def test_nbval_compares_tagged_cells_with_the_tolerance(stored, tags, passes, request):
    name = request.node.name.replace("[", "_").replace("]", "").replace(" ", "_")[-40:]
    done = _run_nbval(name, stored, tags)
    assert (done.returncode == 0) == passes, done.stdout[-3000:]


def test_glued_and_displayed_text_is_compared_like_a_stream():
    # the claims appendix glues the ledger as JSON text (a rich output), beside its printed text
    glued = "application/papermill.record/text/plain"
    stored = [
        nbformat.v4.new_output("display_data", data={glued: '{"worst": 0.85, "status": "known miss"}'}),
        nbformat.v4.new_output("stream", name="stdout", text="qk 16.5\n"),
    ]
    fresh = [
        nbformat.v4.new_output("display_data", data={glued: '{"worst": 0.84, "status": "known miss"}'}),
        nbformat.v4.new_output("stream", name="stdout", text="qk 16.0\n"),
    ]
    snapped = tolerance.snap_outputs(stored, fresh)
    assert snapped[0].data[glued] == stored[0].data[glued] and snapped[1].text == stored[1].text
    flipped = [nbformat.v4.new_output("display_data", data={glued: '{"worst": 0.84, "status": "pass"}'})]
    assert tolerance.snap_outputs(stored[:1], flipped)[0].data[glued] != stored[0].data[glued]


def test_a_wider_number_may_move_a_column_or_a_line_break():
    stored = "seed 10 = {qk: 16.5, ov: 9.5}\n  seed 11 = {qk: 18.0,\n  ov: 8.0}\n"
    fresh = "seed 10 = {qk: 16.5, ov: 10.0}\n  seed 11 = {qk: 18.0, ov:\n  8.5}\n"  # textwrap broke the line elsewhere
    assert tolerance.snap(stored, fresh) == stored
