"""Every field of every chapter's ``Settings`` is checked at construction, by name (issue 44).

For each chapter and appendix module, each field gets a wrong value of each kind its rule admits (wrong type, out of range, wrong length, a wrong item,
a repeat, an unknown choice), derived from the rule :func:`mmtoken.validate.rules_of` reports, and must be refused
with an error naming ``Settings.<field>``; the defaults and ``settings("paper")`` construct. The relations between
fields, and the cases of the issue, are checked one by one below.
"""

import math

import numpy as np
import pytest

from mmtoken import chapters, validate

MODULES = chapters.load_all()


def wrong_values(rule: validate.Rule, default) -> list[tuple[str, object]]:
    """``(kind, value)`` pairs that ``rule`` must refuse; ``default`` is a value it accepts."""
    k = rule.kind
    if k == "optional":
        return [(kind, v) for kind, v in wrong_values(rule.item, default) if v is not None]
    if k in ("integer", "real"):
        out = [("type", "1"), ("type", True), ("type", None)]
        out += [("type", 1.5)] if k == "integer" else [("range", math.nan), ("range", math.inf)]
        step = 1 if k == "integer" else 1e-9 * max(1.0, abs(rule.low or 0), abs(rule.high or 0))
        if rule.low is not None:
            out.append(("range", rule.low if rule.low_open else rule.low - step))
        if rule.high is not None:
            out.append(("range", rule.high if rule.high_open else rule.high + step))
        return out
    if k == "boolean":
        return [("type", "no"), ("type", 0), ("type", None)]
    if k == "choice":
        return [("value", "no such option"), ("value", 1)]
    if k == "text":
        return [("type", 3)]
    if k == "custom":
        return [("value", "no such thing"), ("value", 3.5)]
    # a sequence
    items = tuple(default or ())  # an optional sequence whose default is None: its type and length
    out = [("type", "ab")] + ([] if rule.scalar else [("type", 5)])
    if rule.min_length:
        out.append(("length", items[: rule.min_length - 1]))
    if rule.max_length is not None:
        out.append(("length", items + items[-1:]))
    if rule.distinct and items:
        out.append(("repeat", items + items[:1]))
    per_item = [rule.item] * len(items) if rule.item is not None else list(rule.items)
    for i, (sub, v) in enumerate(zip(per_item, items)):
        out += [(f"item {i}: {kind}", items[:i] + (bad,) + items[i + 1 :]) for kind, bad in wrong_values(sub, v)]
        if rule.item is not None:
            break  # one position is enough when every item has the same rule
    return out


def cases():
    for name, m in MODULES.items():
        defaults = m.Settings()
        for field, rule in validate.rules_of(m.Settings).items():
            for kind, bad in wrong_values(rule, getattr(defaults, field)):
                yield name, field, kind, bad


def test_every_module_with_settings_is_covered():
    assert len(MODULES) == 20 and all(hasattr(m, "Settings") for m in MODULES.values())


@pytest.mark.parametrize("name", sorted(MODULES))
def test_defaults_and_both_scales_construct(name):
    m = MODULES[name]
    s = m.Settings()
    assert hash(s) == hash(m.Settings()) and set(validate.rules_of(m.Settings)) == set(s.__dataclass_fields__)
    if hasattr(m, "settings"):
        assert m.settings("quick") == s and isinstance(m.settings("paper"), m.Settings)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_wrong_value_of_each_field_is_refused_by_name(name):
    m = MODULES[name]
    checked = 0
    for mod, field, kind, bad in cases():
        if mod != name:
            continue
        with pytest.raises((TypeError, ValueError)) as info:
            m.Settings(**{field: bad})
        msg = str(info.value)
        assert msg.startswith(f"Settings.{field}") and " must be " in msg, (field, kind, bad, msg)
        if kind.endswith("type"):
            assert isinstance(info.value, TypeError), (field, kind, bad, msg)
        checked += 1
    assert checked >= 3 * len(m.Settings.__dataclass_fields__)  # at least three wrong values a field


# --------------------------------------------------------------------------- relations and the issue's cases
RELATIONS = [
    ("ch00_tour", dict(trap_every=20_000), "trap_every", "at most trap_steps"),
    ("ch01_model", dict(pbar=(1, 0, 1)), "pbar", "unit vector"),
    ("ch02_global", dict(long_steps=500), "long_steps", "above published_steps"),
    ("ch02_global", dict(long_every=9001), "long_every", "at most long_steps - published_steps"),
    ("ch03_local", dict(record_every=1501), "record_every", "at most steps and counter_steps"),
    ("ch05_joint", dict(rhos=(8.0,)), "rhos", "512"),
    ("ch05_joint", dict(every=1001), "every", "at most steps"),
    ("ch06_nonlinear", dict(R_max=0.4), "R_max", "above R_min"),
    ("ch06_nonlinear", dict(q0_grid=(0.1, 0.01)), "q0_grid", "increasing"),
    ("ch07_losses", dict(long_every=1501), "long_every", "at most long_steps"),
    ("ch10_one_step", dict(min_len=9), "min_len", "at most T"),
    ("ch10_one_step", dict(pos_frac=0.001), "pos_frac", "both classes"),
    ("ch11_cls_margin", dict(sigma0=0.3), "sigma0", "one of the sweep's scales"),
    ("ch11_cls_margin", dict(cap_scale=0.3), "cap_scale", "one of the sweep's scales"),
    ("ch13_w_vs_kq", dict(record_every=20_001), "record_every", "at most steps"),
    ("ch13_w_vs_kq", dict(rank_m=10), "rank_m", "below rank_size's d"),
    ("ch14_overparam", dict(reg_radii=(2.0, 1.0)), "reg_radii", "increasing"),
    ("ch14_overparam", dict(ortho_d=2), "ortho_d", "at least ortho_n"),
    ("ch14_overparam", dict(lp_instances=1001), "lp_instances", "at most count"),
    ("ch15_multi_token", dict(pub_every=2001), "pub_every", "below pub_steps"),
    ("ch15_multi_token", dict(pub_high=1e-7), "pub_high", "above pub_low"),
    ("ch16_rates", dict(every=1001), "every", "last decade|/ 10"),
    ("ch16_rates", dict(d=2), "d", "at least T - 1"),
    ("ch16_rates", dict(judged_seeds=(4, 10)), "judged_seeds", "not in trial_seeds"),
    ("ch17_mirror", dict(record_every=16_001), "record_every", "at most steps"),
    ("ch17_mirror", dict(theorem_record=10**6 + 1), "theorem_record", "at most theorem_steps"),
    ("ch09_vit_sparsity", dict(patch=5), "patch", "divisor of the image side"),
    ("ch09_vit_sparsity", dict(dataset="cifar-10", patch=7), "patch", r"divisor of the image side \(32\)"),
    ("ch09_vit_sparsity", dict(heads=5), "heads", "divisor of width"),
    ("ch09_vit_sparsity", dict(map_epochs=(0, 13)), "map_epochs", r"at most epochs \(12\)"),
    ("ch12_real_reviews", dict(datasets=("rt", "rt")), "datasets", "distinct"),
    ("app_saturation", dict(published_steps=1501), "published_steps", "at most steps"),
    ("app_saturation", dict(every=7), "every", "divisor of published_steps"),
    ("ch07_losses", dict(losses=("logistic", "exponential", "logistic")), "losses", "distinct"),
]


@pytest.mark.parametrize("name, changes, field, words", RELATIONS)
def test_relations_between_fields_are_refused_by_name(name, changes, field, words):
    with pytest.raises(ValueError, match=rf"^Settings\.{field} must be .*({words})"):
        MODULES[name].Settings(**changes)


ISSUE = [  # issue 44, "Settings that run silently wrong or fail unclearly"
    ("ch07_losses", dict(p0=(1.0,)), "p0"),
    ("ch07_losses", dict(C_values=()), "C_values"),
    ("ch06_nonlinear", dict(iters=-1), "iters"),
    ("ch06_nonlinear", dict(pairs=0), "pairs"),
    ("ch16_rates", dict(every=20_000), "every"),
    ("ch16_rates", dict(starts=-1), "starts"),
    ("ch16_rates", dict(low=1.0), "low"),
    ("ch16_rates", dict(T=1), "T"),
    ("ch15_multi_token", dict(lr=math.inf), "lr"),
    ("ch15_multi_token", dict(starts=0), "starts"),
    ("ch03_local", dict(cone_r=-5), "cone_r"),
    ("ch04_inputs", dict(steps_gd=0), "steps_gd"),
    ("ch04_inputs", dict(lr_ngd=-0.1), "lr_ngd"),
    ("ch11_cls_margin", dict(joint_steps=0), "joint_steps"),
    ("ch02_global", dict(long_every=0), "long_every"),
    ("ch13_w_vs_kq", dict(sizes=((4, 4),)), r"sizes\[0\]"),
    ("ch10_one_step", dict(eta=math.nan), "eta"),
    ("ch14_overparam", dict(lp_instances=0), "lp_instances"),
    ("ch09_vit_sparsity", dict(augment="no"), "augment"),
]


@pytest.mark.parametrize("name, changes, field", ISSUE)
def test_the_issues_settings_are_refused_at_construction(name, changes, field):
    with pytest.raises(ValueError, match=rf"^Settings\.{field} must be "):
        MODULES[name].Settings(**changes)


def test_what_a_reader_types_is_stored_as_the_defaults_are():
    ch16, ch08 = MODULES["ch16_rates"], MODULES["ch08_random"]
    assert ch16.Settings(trial_seeds=[0]).trial_seeds == (0,)  # hashable: the runs are memoised on it
    assert ch08.Settings(d=20).d == (20,) and ch08.Settings(d=np.array([2, 4])).d == (2, 4)
    ch07 = MODULES["ch07_losses"]
    assert ch07.Settings(C_values=[1, 2.5]).C_values == (1.0, 2.5)
    with pytest.raises(TypeError, match=r"^Settings\.steps must be an integer >= 1, got 1000\.0"):
        ch07.Settings(steps=1000.0)  # int means int: 1000.0 would key another result


def test_chapter_3_plain_run_starts_from_the_settings_starts():
    ch03 = MODULES["ch03_local"]
    s = ch03.Settings(starts=((0.0, 1.0), (0.0, -1.5)), plain_steps=200)
    r = ch03.plain_run(s)
    assert r.p.shape[1] == 2 and np.array_equal(r.p[0], np.array(s.starts))
    gmm, lmm = ch03.fig1_local_directions()
    assert ch03.plain_limits(r).shape == (2, 2)
    assert np.array_equal(ch03.plain_limits(), np.array([gmm] * 4 + [lmm] * 2))  # the published starts


def test_chapter_12_checks_every_field_of_each_setup_by_name():
    """A Setup's fields are checked by the chapter's Settings (Setup's own code keys the carried runs)."""
    import dataclasses

    ch12 = MODULES["ch12_real_reviews"]
    named = {f for fields in ch12.SETUP_RULES for f in fields.split()}
    assert named == {f.name for f in dataclasses.fields(ch12.review_runs.Setup)} - {"dataset"}
    rt = ch12.Settings().rt
    for field, bad in (("d", 0), ("lr", math.nan), ("scan", ()), ("max_train", 0), ("warmup", -1)):
        with pytest.raises(ValueError, match=rf"^Settings\.rt\.{field} must be "):
            ch12.Settings(rt=dataclasses.replace(rt, **{field: bad}))
    with pytest.raises(ValueError, match=r"^Settings\.rt must be a Setup whose dataset is 'rt'"):
        ch12.Settings(rt=ch12.Settings().imdb)
    assert ch12.Settings(rt=dataclasses.replace(rt, scan=[1.0, 2.0])).rt.scan == (1.0, 2.0)  # stored hashable
