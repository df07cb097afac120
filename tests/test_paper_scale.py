"""benchmarks/paper_scale.py reads each claim's verdict and printed line from an executed notebook."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _module():
    spec = importlib.util.spec_from_file_location("paper_scale", ROOT / "benchmarks" / "paper_scale.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_claim_lines_and_verdicts_from_stream_outputs(tmp_path):
    lines = [
        "pass        A.random.correlation  mean corr 0.9991 >= 0.997",
        "FAIL        A.random.score_gap    converged 0.97 < 0.99",
        "known miss  C.w.frobenius         seed 7",
    ]
    nb = {
        "cells": [
            {"cell_type": "code", "outputs": [{"output_type": "stream", "name": "stdout", "text": lines[0] + "\n"}]},
            {"cell_type": "markdown", "source": "pass A.not.a.claim (markdown is not output)"},
            {
                "cell_type": "code",
                "outputs": [
                    {"output_type": "execute_result", "data": {"text/plain": "pass A.not.stream"}},
                    {"output_type": "stream", "name": "stdout", "text": ["  " + lines[1] + "\n", "other text\n"]},
                    {"output_type": "stream", "name": "stdout", "text": lines[2]},
                ],
            },
        ]
    }
    path = tmp_path / "executed.ipynb"
    path.write_text(json.dumps(nb))
    ps = _module()
    assert ps.claim_lines(path) == {
        "A.random.correlation": lines[0],
        "A.random.score_gap": lines[1],
        "C.w.frobenius": lines[2],
    }
    assert ps.verdicts(path) == {
        "A.random.correlation": "pass",
        "A.random.score_gap": "FAIL",
        "C.w.frobenius": "known miss",
    }
