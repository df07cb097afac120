"""``make reproduce``'s comparison of the carried runs with their retraining (scripts/reproduce.py)."""

import importlib.util
import json
from pathlib import Path

import numpy as np

from mmtoken.book import resultcache, trained

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("reproduce", ROOT / "scripts" / "reproduce.py")
reproduce = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reproduce)

RTOL = 1e-3


def _write(folder: Path, file: str, fp: str, values: np.ndarray, note: dict) -> None:
    resultcache.save(folder / file, file.removesuffix(".npz"), fp, {"curve": values}, note)


def _carried(tmp: Path, files: dict[str, str]) -> Path:
    carried = tmp / "carried"
    for file, fp in files.items():
        _write(carried, file, fp, np.linspace(1.0, 2.0, 5), {"accuracy": 0.9, "seconds": 3.0})
    entries = [{"file": f, "name": f.removesuffix(".npz"), "fingerprint": fp} for f, fp in files.items()]
    (carried / trained.MANIFEST).write_text(json.dumps({"files": entries}))
    return carried


def test_a_retraining_within_the_tolerance_passes_even_keyed_by_a_retrained_runs_digest(tmp_path):
    carried = _carried(tmp_path, {"run/a.npz": "f1", "run/b.npz": "f2"})
    new = tmp_path / "new"
    wobble = np.linspace(1.0, 2.0, 5) * (1 + 0.5 * RTOL)
    _write(new, "run/a.npz", "f1", wobble, {"accuracy": 0.9, "seconds": 99.0})  # timings are not compared
    _write(new, "run/b.npz", "other", wobble, {"accuracy": 0.9, "seconds": 1.0})  # keyed by another upstream digest
    n, problems, rekeyed = reproduce.compare(carried, new, RTOL)
    assert (n, problems, rekeyed) == (2, [], 1)


def test_a_value_off_by_more_than_the_tolerance_or_a_run_not_retrained_fails(tmp_path):
    carried = _carried(tmp_path, {"run/a.npz": "f1", "run/b.npz": "f2"})
    new = tmp_path / "new"
    far = np.linspace(1.0, 2.0, 5) * (1 + 3 * RTOL)
    _write(new, "run/a.npz", "f1", far, {"accuracy": 0.9})
    n, problems, _ = reproduce.compare(carried, new, RTOL)
    assert n == 2 and len(problems) == 2
    assert problems[0].startswith("run/a.npz[0]/curve: differs by")
    assert problems[1].startswith("run/b.npz: not retrained")
    _write(new, "run/b.npz", "f2", np.linspace(1.0, 2.0, 5), {"accuracy": 0.8})
    assert any("accuracy: differs" in p for p in reproduce.compare(carried, new, RTOL)[1])
