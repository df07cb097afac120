"""Fingerprints cover a computation, not the modules around it (:mod:`mmtoken.book.fingerprint`).

The package is copied to a scratch folder and edited there: a plotting or download
function changes no recorded claim's key; a trainer changes exactly the keys of the
claims whose computation calls it; and what a claim actually calls when it runs is
inside its static closure.
"""

import ast
import shutil
import sys
from pathlib import Path

import pytest

from mmtoken.book import fingerprint, ledger, records
from mmtoken.chapters import load_all

PACKAGE = Path(fingerprint.__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def claims():
    load_all()
    return ledger.select(None)


@pytest.fixture
def scratch(tmp_path):
    root = tmp_path / "mmtoken"
    shutil.copytree(PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def keys(root: Path, claims) -> dict[str, str]:
    index = fingerprint.Index(root)
    return {c.id: index.digest(records.code_roots(c, ledger.RESULT)) for c in claims}


def edit_function(path: Path, name: str) -> None:
    """Insert a statement as the first line of the body of module-level function ``name``."""
    text = path.read_text(encoding="utf-8")
    (fn,) = [n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name]
    first = fn.body[1] if isinstance(fn.body[0], ast.Expr) and len(fn.body) > 1 else fn.body[0]
    lines = text.splitlines(keepends=True)
    lines.insert(first.lineno - 1, " " * first.col_offset + "_edited = None  # an edit\n")
    path.write_text("".join(lines), encoding="utf-8")


def test_the_scratch_copy_keys_claims_as_the_package_does(scratch, claims):
    here = keys(scratch, claims)
    assert here == {c.id: fingerprint.index().digest(records.code_roots(c, ledger.RESULT)) for c in claims}
    assert all(len(k) == 64 for k in here.values())


def test_editing_plotting_or_download_code_leaves_every_claim_valid(scratch, claims):
    before = keys(scratch, claims)
    plotting = ast.parse((scratch / "book" / "plotting.py").read_text(encoding="utf-8"))
    for fn in [n.name for n in plotting.body if isinstance(n, ast.FunctionDef)]:
        edit_function(scratch / "book" / "plotting.py", fn)
    download = ast.parse((scratch / "datasets" / "download.py").read_text(encoding="utf-8"))
    for fn in [n.name for n in download.body if isinstance(n, ast.FunctionDef)]:
        edit_function(scratch / "datasets" / "download.py", fn)
    edit_function(scratch / "book" / "html_tables.py", "claims_html")
    assert keys(scratch, claims) == before


def test_editing_a_trainer_makes_exactly_its_claims_stale(scratch, claims):
    before = keys(scratch, claims)
    edit_function(scratch / "attention" / "train.py", "train_p")
    after = keys(scratch, claims)
    stale = {i for i in before if before[i] != after[i]}
    index = fingerprint.Index(PACKAGE)
    users = {
        c.id
        for c in claims
        if ("mmtoken.attention.train", "train_p") in index.closure(records.code_roots(c, ledger.RESULT))
    }
    assert stale == users
    # independently of the analysis: chapter 2's GD claims train p with train_p; its
    # regularization path (an SVM solve per radius), the review models (their own trainer)
    # and the ViT do not
    assert {"A.global.gd", "A.global.plain_gd"} <= stale
    assert not stale & {c.id for c in claims if c.id.startswith(("A.global.reg_path", "B.imdb.", "B.rt.", "A.vit."))}
    assert 0 < len(stale) < len(claims)


def test_a_claim_runs_only_code_inside_its_closure(claims):
    """Every package function a cheap claim calls (found by profiling the run) is in its closure."""
    index = fingerprint.index()
    for cid in ("core.grad_autograd", "core.att_svm_kkt"):
        (c,) = [c for c in claims if c.id == cid]
        called: set[tuple[str, str]] = set()

        def profile(frame, event, arg, called=called):
            if event == "call":
                module = frame.f_globals.get("__name__", "")
                in_source = frame.f_code.co_filename.startswith(str(PACKAGE))  # not dataclass-made code
                if in_source and module.startswith("mmtoken.") and module not in fingerprint.OUTSIDE:
                    called.add((module, frame.f_code.co_qualname.split(".")[0]))

        sys.setprofile(profile)
        try:
            assert c.func().passed
        finally:
            sys.setprofile(None)
        closure = set(index.closure(records.code_roots(c, ledger.RESULT)))
        whole = {m for m, n in closure if n == fingerprint.WHOLE}
        called = {(m, n) for m, n in called if n not in ("<module>", "<lambda>", "<genexpr>") and m not in whole}
        assert called, cid
        assert called <= closure, sorted(called - closure)


def test_a_module_used_as_a_value_brings_all_of_it(tmp_path):
    root = tmp_path / "mmtoken"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("def f():\n    return 1\n\ndef g():\n    return 2\n")
    (root / "b.py").write_text(
        "from . import a\nfrom .a import f\n\ndef uses_f():\n    return f()\n\n"
        "def uses_a():\n    return getattr(a, 'g')()\n\ndef lazy():\n    from .a import g\n    return g()\n"
    )
    index = fingerprint.Index(root)
    assert index.closure([("mmtoken.b", "uses_f")]) == [("mmtoken.a", "f"), ("mmtoken.b", "uses_f")]
    assert {("mmtoken.a", "f"), ("mmtoken.a", "g")} <= set(index.closure([("mmtoken.b", "uses_a")]))
    assert ("mmtoken.a", "g") in index.closure([("mmtoken.b", "lazy")])
    assert ("mmtoken.a", "f") not in index.closure([("mmtoken.b", "lazy")])


def test_results_cache_keys_by_the_compute_function(tmp_path, monkeypatch):
    """A result's key is the code its compute function calls (fingerprint.of), in the chapter it belongs to."""
    import numpy as np

    from mmtoken.book import resultcache
    from mmtoken.chapters import ch02_global as ch

    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path / "data"))
    called = []

    def compute():
        called.append(1)
        return {"x": np.arange(3.0)}, {}

    compute.__module__, compute.__qualname__ = ch.__name__, "long_run.<locals>.compute"  # as if defined there
    assert fingerprint.of(compute) == fingerprint.index().digest([(ch.__name__, "long_run")])
    resultcache.cached(ch.CHAPTER, "fp-test", compute, config={"k": 1})
    path = resultcache.path_of(ch.CHAPTER, "fp-test", {"k": 1})
    fp = resultcache.fingerprint(fingerprint.of(compute), {"k": 1}, "")
    resultcache.load(path, f"{ch.CHAPTER}/fp-test", fp)  # stored under that key
    resultcache.cached(ch.CHAPTER, "fp-test", compute, config={"k": 1})
    assert called == [1]  # read back


def test_a_changed_module_constant_changes_the_key(claims, monkeypatch):
    """Code that reads a module constant someone set from outside (``ch.GD_MIN_CORR = ...``) is not the source's."""
    from mmtoken.chapters import ch02_global as ch

    claim = ledger.REGISTRY["A.global.gd"].func
    before = fingerprint.of(claim)
    assert fingerprint.changes(claim) is None and fingerprint.is_book_code(claim)
    monkeypatch.setattr(ch, "GD_MIN_CORR", 0.9999999999)
    assert fingerprint.changes(claim) is not None and not fingerprint.is_book_code(claim)
    assert fingerprint.of(claim) != before
    monkeypatch.setattr(ch, "instances", object())  # an import rebound
    assert not fingerprint.is_book_code(claim)


def test_module_state_is_not_a_constant(claims):
    """A module variable its own functions reassign (``global``: the current scale) is state, not code."""
    from mmtoken import config

    claim = ledger.REGISTRY["A.global.gd"].func
    with config.use_scale("paper"):
        assert fingerprint.changes(claim) is None


def review_entries() -> dict:
    """The code of each kind of chapter 12's results: what their keys cover (the ``code`` of their store entries)."""
    from mmtoken.embeddings import review_regime, review_runs, review_search, review_seeds

    return {
        "seed": (review_seeds.run_seed, review_runs.prepare),
        "profile": (review_seeds.profile, review_runs.prepare),
        "search": (review_search.search,),
        "regime": (review_regime.run, review_runs.prepare),
    }


def review_keys(root: Path) -> dict[str, str]:
    index = fingerprint.Index(root)
    return {k: index.digest([r for f in code for r in fingerprint.roots_of(f)]) for k, code in review_entries().items()}


def edit_statement(path: Path, start: str) -> None:
    """Insert an argument after the line that starts with ``start`` (the first line of an assignment from a call):
    ``*()`` adds nothing to the value but changes the code."""
    text = path.read_text(encoding="utf-8")
    assert text.count(f"\n{start}") == 1, start
    head, tail = text.split(f"\n{start}", 1)
    line, rest = tail.split("\n", 1)
    path.write_text(f"{head}\n{start}{line}\n    *(),\n{rest}", encoding="utf-8")


def test_review_run_keys_cover_the_training_and_not_the_figures(scratch):
    """A real-review run's key changes with any function its training calls (the tokenizer, the losses, the
    statistics, the model, phase two, the protocol) and with none of the chapter's figures, tables or claims."""
    before = review_keys(scratch)
    assert before == {k: fingerprint.of(*code) for k, code in review_entries().items()}, "the scratch copy keys alike"
    assert len(set(before.values())) == len(before)
    closure = set(fingerprint.index().closure([r for f in review_entries()["seed"] for r in fingerprint.roots_of(f)]))
    assert {
        ("mmtoken.datasets.tokenize", "encode"),
        ("mmtoken.attention.losses", "logistic"),
        ("mmtoken.embeddings.corpus_stats", "token_stats"),
        ("mmtoken.embeddings.review_model", "fit"),
        ("mmtoken.embeddings.review_phase_two", "phase_two"),
        ("mmtoken.embeddings.review_runs", "train_model"),
        ("mmtoken.embeddings.review_seeds", "two_phase"),
    } <= closure
    assert not {m for m, _ in closure} & {"mmtoken.book.plotting", "mmtoken.chapters.ch12_real_reviews"}

    # the chapter's module (figures, tables, claims) and the plotting primitives: every key stays
    for path in (scratch / "book" / "plotting.py", scratch / "chapters" / "ch12_real_reviews.py"):
        for fn in [n.name for n in ast.parse(path.read_text(encoding="utf-8")).body if isinstance(n, ast.FunctionDef)]:
            edit_function(path, fn)
    assert review_keys(scratch) == before

    # each function the training calls: the seed's key changes every time
    edits = [
        (scratch / "datasets" / "tokenize.py", "encode"),
        (scratch / "embeddings" / "corpus_stats.py", "token_stats"),
        (scratch / "embeddings" / "corpus_stats.py", "spearman"),
        (scratch / "embeddings" / "embedding.py", "gather_outputs"),
        (scratch / "embeddings" / "review_model.py", "fit"),
        (scratch / "embeddings" / "review_model.py", "one_step_E"),
        (scratch / "embeddings" / "review_phase_two.py", "phase_two"),
        (scratch / "embeddings" / "review_runs.py", "prepare"),
        (scratch / "embeddings" / "review_runs.py", "train_model"),
        (scratch / "embeddings" / "review_seeds.py", "two_phase"),
        (scratch / "attention" / "losses.py", None),
    ]
    seen = [before["seed"]]
    for path, fn in edits:
        if fn is None:
            edit_statement(path, "logistic = Loss(")
        else:
            edit_function(path, fn)
        seen.append(review_keys(scratch)["seed"])
        assert seen[-1] != seen[-2], f"editing {path.name}:{fn} left the seed's key unchanged"


def test_review_run_keys_are_of_definitions_not_modules(scratch):
    """The seed-free profile trains no attention model: editing the joint trainer leaves its key (and the
    regime's, which trains by phase two) valid, and changes the seed's and the search's."""
    before = review_keys(scratch)
    edit_function(scratch / "embeddings" / "review_model.py", "fit")
    after = review_keys(scratch)
    assert {k for k in before if before[k] != after[k]} == {"seed", "search"}


def test_docstrings_comments_and_layout_leave_every_key(scratch, claims):
    """A fingerprint hashes code, not prose: rewording every docstring of the trainers' module, adding comments and
    reflowing it keeps every claim's key; the nearest wrong edit (one statement in the code) changes them."""
    before = keys(scratch, claims)
    path = scratch / "attention" / "train.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    reworded = 0
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
        ):
            body[0].value.value = "Reworded."
            reworded += 1
    assert reworded >= 5
    text = "# a comment at the top\n" + ast.unparse(tree).replace("\n\n", "\n\n# between definitions\n\n")
    path.write_text(text, encoding="utf-8")
    assert keys(scratch, claims) == before
    edit_function(path, "train_p")
    assert keys(scratch, claims) != before
    assert fingerprint.code_text('def f(x):\n    """Doc."""\n    # why\n    return (x +\n            1)\n') == (
        fingerprint.code_text("def f(x): return x + 1")
    )
    assert fingerprint.code_text("def f(x): return x + 1") != fingerprint.code_text("def f(x): return x + 2")
