"""The small ViT: shapes, attention rows, key-query matrices, training and the cached experiment at tiny scale."""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import replace

import numpy as np
import pytest
import torch

from mmtoken import vit
from mmtoken import vit_runs as runs
from mmtoken.datasets.download import sha256_file
from mmtoken.experiments import vit_sparsity as vs
from mmtoken.experiments import vit_tuning as vt


def small(**kw) -> vit.ViTConfig:
    base = dict(image_size=8, channels=1, patch=4, width=16, depth=2, heads=2, mlp_ratio=2, n_classes=3)
    return vit.ViTConfig(**{**base, **kw})


# --------------------------------------------------------------------------- the model


@pytest.mark.parametrize("cfg", [vit.ViTConfig(), small(), small(channels=3, image_size=12, patch=2, heads=4)])
def test_forward_shapes_and_attention_rows(cfg):
    torch.manual_seed(0)
    model = vit.ViT(cfg)
    x = torch.randn(5, cfg.channels, cfg.image_size, cfg.image_size)
    logits, attns = model(x, return_attention=True)
    assert logits.shape == (5, cfg.n_classes)
    assert len(attns) == cfg.depth
    T = cfg.n_patches + 1
    for a in attns:
        assert a.shape == (5, cfg.heads, T, T)
        assert (a >= 0).all()
        torch.testing.assert_close(a.sum(-1), torch.ones(5, cfg.heads, T))
        cls = vit.cls_patch_attention(a)
        assert cls.shape == (5, cfg.heads, cfg.n_patches)
        torch.testing.assert_close(cls.sum(-1), torch.ones(5, cfg.heads))
    torch.testing.assert_close(model(x), logits)


def test_default_grid_is_seven_by_seven():
    cfg = vit.ViTConfig()
    assert (cfg.grid, cfg.n_patches) == (7, 49)


def test_patchify_order():
    x = torch.arange(2 * 4 * 4, dtype=torch.float32).view(1, 2, 4, 4)
    p = vit.patchify(x, 2)
    assert p.shape == (1, 4, 8)
    # patch 1 = top-right block: channel 0 rows 0-1, cols 2-3, then channel 1
    assert p[0, 1].tolist() == [2, 3, 6, 7, 18, 19, 22, 23]


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"patch": 3}, "does not divide image_size"),
        ({"heads": 3}, "does not divide width"),
        ({"depth": 0}, "positive"),
        ({"init_std": 0.0}, "init_std"),
    ],
)
def test_bad_config(kw, match):
    with pytest.raises(ValueError, match=match):
        small(**kw)


def test_bad_input_shape():
    model = vit.ViT(small())
    with pytest.raises(ValueError, match=r"expected images of shape \(B, 1, 8, 8\)"):
        model(torch.randn(2, 3, 8, 8))
    with pytest.raises(ValueError, match="attention weights"):
        vit.cls_patch_attention(torch.ones(2, 3, 4))


def test_key_query_matrices_give_the_logits():
    torch.manual_seed(1)
    cfg = small(heads=2, init_std=0.3)
    model = vit.ViT(cfg)
    attn = model.blocks[0].attn
    x = torch.randn(3, cfg.n_patches + 1, cfg.width)
    _, a = attn(x)
    W = attn.key_query_matrices().detach()  # (h, d, d)
    logits = torch.einsum("bsd,hde,bte->bhst", x, W, x) / math.sqrt(attn.head_dim)
    torch.testing.assert_close(logits.softmax(-1), a)
    fro, spec = vit.key_query_norm(model, 0)
    assert fro == pytest.approx(float(W.double().square().sum().sqrt()), rel=1e-6)
    assert spec == pytest.approx(max(float(torch.linalg.matrix_norm(w.double(), 2)) for w in W), rel=1e-6)


def test_cls_logits_and_spread_bound():
    torch.manual_seed(2)
    cfg = small(heads=2, init_std=0.5)
    model = vit.ViT(cfg)
    with torch.no_grad():
        model.blocks[-1].ln1.weight.mul_(1.7)
        model.blocks[-1].ln1.bias.normal_()
    x = torch.randn(6, 1, 8, 8)
    _, attns = model(x, return_attention=True)
    z = vit.cls_logits(model, x)
    torch.testing.assert_close(z.softmax(-1), vit.cls_patch_attention(attns[-1]))
    spread = z.max(-1).values - z.min(-1).values
    assert (spread <= vit.logit_spread_bound(model)).all()
    # entropy drop is at most the spread
    assert (math.log(cfg.n_patches) - vit.entropy(z.softmax(-1)) <= spread + 1e-6).all()


def test_entropy():
    p = torch.tensor([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(vit.entropy(p), torch.tensor([math.log(4), 0.0]))


# --------------------------------------------------------------------------- training pieces


def test_lr_factor_warmup_then_cosine():
    total = 100
    f = [vit.lr_factor(s, total, 0.1) for s in range(total)]
    assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)
    assert f[10] == pytest.approx(1.0) and all(a >= b for a, b in zip(f[10:], f[11:]))
    assert vit.lr_factor(total, total, 0.1) == pytest.approx(0.0)
    assert vit.lr_factor(0, total, 0.0) == pytest.approx(1.0)


def test_augment_crops_and_flips():
    x = torch.arange(2 * 3 * 6 * 6, dtype=torch.float32).view(2, 3, 6, 6) + 1
    y = vit.augment(x, torch.Generator().manual_seed(0), pad=2)
    assert y.shape == x.shape
    for i in range(2):  # every kept value comes from the same image, channels move together
        vals = set(y[i].unique().tolist()) - {0.0}
        assert vals <= set(x[i].unique().tolist())
    assert torch.equal(vit.augment(x, torch.Generator().manual_seed(0), pad=2), y)


def test_normalizer():
    x = torch.randint(0, 256, (50, 3, 4, 4), dtype=torch.uint8)
    n = vit.Normalizer.fit(x)
    z = n(x)
    torch.testing.assert_close(z.mean((0, 2, 3)), torch.zeros(3), atol=1e-5, rtol=0)
    torch.testing.assert_close(z.std((0, 2, 3)), torch.ones(3), atol=1e-3, rtol=0)
    chunked = vit.Normalizer.fit(x, chunk=7)
    torch.testing.assert_close(chunked.mean, n.mean)
    torch.testing.assert_close(chunked.std, n.std)
    with pytest.raises(ValueError, match="non-empty batch"):
        vit.Normalizer.fit(x[:0])


def bright_patch_data(n: int, seed: int = 0, size: int = 8, patch: int = 4, classes: int = 3):
    """Images whose class is the position of one bright patch (a task that needs attention)."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    x = torch.randint(0, 60, (n, 1, size, size), generator=g, dtype=torch.uint8)
    grid = size // patch
    for i in range(n):
        r, c = divmod(int(y[i]), grid)
        x[i, 0, r * patch : (r + 1) * patch, c * patch : (c + 1) * patch] = 250
    return x, y


def test_train_is_deterministic_and_learns():
    x, y = bright_patch_data(256)
    cfg = vit.TrainConfig(epochs=10, batch_size=32, lr=3e-3, seed=3)
    norm = vit.Normalizer.fit(x)
    states, logs = [], []
    for _ in range(2):
        torch.manual_seed(0)
        model = vit.ViT(small())
        calls = []
        vit.train(
            model, x, y, cfg, norm, log_points=[0, 8, 80], on_log=lambda s, e, l, calls=calls: calls.append((s, e, l))
        )
        states.append(model.state_dict())
        logs.append(calls)
    for k in states[0]:
        assert torch.equal(states[0][k], states[1][k])
    assert [c[:2] for c in logs[0]] == [(0, 0.0), (8, 1.0), (80, 10.0)]
    loss, acc = vit.evaluate(model, x, y, norm)
    assert acc > 0.9 and loss < 0.5


def test_train_bad_input():
    x, y = bright_patch_data(16)
    model = vit.ViT(small())
    norm = vit.Normalizer.fit(x)
    with pytest.raises(ValueError, match="exceeds"):
        vit.train(model, x, y, vit.TrainConfig(batch_size=64), norm)
    with pytest.raises(ValueError, match="labels"):
        vit.train(model, x, y[:3], vit.TrainConfig(batch_size=4), norm)
    with pytest.raises(ValueError, match="lr"):
        vit.TrainConfig(lr=0.0)


def test_paper_model_takes_one_step_on_cifar_shaped_input():
    torch.manual_seed(0)
    exp = vs.experiment("paper")
    assert (exp.dataset, exp.model.grid, exp.model.channels) == ("cifar-10", 16, 3)
    model = vit.ViT(exp.model)
    x = torch.randint(0, 256, (2, 3, 32, 32), dtype=torch.uint8)
    loss = torch.nn.functional.cross_entropy(
        model(vit.Normalizer([0.5] * 3, [0.25] * 3)(vit.augment(x, torch.Generator()))), torch.tensor([1, 2])
    )
    loss.backward()
    assert math.isfinite(loss.item())


def test_value_output_matrices_give_the_attention_output():
    """out(attn @ v(x)) = attn @ x @ (W_V W_O) + (b_V W_O + b_O), since every attention row sums to one."""
    torch.manual_seed(3)
    cfg = small(heads=2, init_std=0.3)
    attn = vit.ViT(cfg).blocks[0].attn
    with torch.no_grad():
        attn.v.bias.normal_()
        attn.out.bias.normal_()
    x = torch.randn(3, cfg.n_patches + 1, cfg.width)
    y, a = attn(x)
    ov = attn.value_output_matrices().detach()  # (h, d, d)
    assert ov.shape == (2, cfg.width, cfg.width)
    expected = torch.einsum("bhst,btd,hde->bse", a, x, ov) + attn.v.bias @ attn.out.weight.T + attn.out.bias
    torch.testing.assert_close(y, expected, atol=1e-5, rtol=1e-5)


def test_weight_norms():
    torch.manual_seed(4)
    model = vit.ViT(small(heads=2, init_std=0.2))
    for layer in (0, -1):
        n = vit.weight_norms(model, layer)
        assert tuple(n) == vit.WEIGHT_NORMS
        assert (n["qk"], n["qk_spec"]) == pytest.approx(vit.key_query_norm(model, layer))
        b = model.blocks[layer]
        assert n["v"] == pytest.approx(float(b.attn.v.weight.detach().norm()), rel=1e-6)
        assert n["mlp_in"] == pytest.approx(float(b.mlp[0].weight.detach().norm()), rel=1e-6)
        assert n["mlp_out"] == pytest.approx(float(b.mlp[2].weight.detach().norm()), rel=1e-6)
        ov = b.attn.value_output_matrices().detach().double()
        assert n["ov"] == pytest.approx(float(ov.square().sum().sqrt()), rel=1e-6)
    # one head: the key-query product of W_Q and W_K is W_Q^T-weight times W_K-weight
    model = vit.ViT(small(heads=1, init_std=0.2))
    b = model.blocks[-1].attn
    w = (b.q.weight.T @ b.k.weight).detach().double()
    assert vit.weight_norms(model)["qk"] == pytest.approx(float(w.norm()), rel=1e-6)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"epochs": 0}, "epochs"),
        ({"epochs": 2.5}, "epochs"),
        ({"batch_size": -1}, "batch_size"),
        ({"lr": float("nan")}, "lr"),
        ({"lr": float("inf")}, "lr"),
        ({"lr": -1e-3}, "lr"),
        ({"weight_decay": -0.1}, "weight_decay"),
        ({"warmup": 1.0}, "warmup"),
        ({"warmup": float("nan")}, "warmup"),
        ({"betas": (0.9, 1.0)}, "betas"),
        ({"grad_clip": 0.0}, "grad_clip"),
        ({"grad_clip": float("nan")}, "grad_clip"),
        ({"seed": -1}, "seed"),
        ({"seed": 1.5}, "seed"),
        ({"threads": 0}, "threads"),
    ],
)
def test_bad_train_config_names_the_argument(kw, match):
    with pytest.raises(ValueError, match=f"TrainConfig.{match}"):
        vit.TrainConfig(**kw)


def test_pinned_threads_restores_the_setting():
    before = torch.get_num_threads()
    with vit.pinned_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with vit.pinned_threads(None):
        assert torch.get_num_threads() == before


# --------------------------------------------------------------------------- splits and statistics


def test_split_indices():
    tr, va = runs.split_indices(100, 20, 7)
    assert len(va) == 20 and len(tr) == 80 and not set(tr) & set(va)
    assert sorted(set(tr) | set(va)) == list(range(100))
    assert (np.diff(tr) > 0).all() and (np.diff(va) > 0).all()
    tr2, va2 = runs.split_indices(100, 20, 7)
    np.testing.assert_array_equal(va, va2)
    assert not np.array_equal(va, runs.split_indices(100, 20, 8)[1])
    for bad in (0, 100):
        with pytest.raises(ValueError, match="n_validation"):
            runs.split_indices(100, bad, 0)


def test_effective_patches():
    np.testing.assert_allclose(runs.effective_patches(np.full((2, 8), 1 / 8)), [8, 8])
    np.testing.assert_allclose(runs.effective_patches(np.eye(3)), [1, 1, 1])
    np.testing.assert_allclose(runs.effective_patches([0.5, 0.5, 0, 0]), 2)


def test_attention_statistics_against_a_direct_computation():
    torch.manual_seed(5)
    cfg = small(heads=2, init_std=0.5, n_classes=4)
    model = vit.ViT(cfg)
    x, y = bright_patch_data(37, seed=2, classes=4)
    norm = vit.Normalizer.fit(x)
    fg = runs.foreground_mask(x.numpy(), cfg.patch, 0.5)
    s = runs.attention_statistics(model, x.numpy(), y.numpy(), norm, fg, batch_size=10)  # 4 uneven batches
    logits, attns = model(norm(x), return_attention=True)
    loss, acc = vit.evaluate(model, x, y, norm)
    assert s["loss"] == pytest.approx(loss, rel=1e-5) and s["acc"] == pytest.approx(acc)
    assert len(s["layers"]) == cfg.depth and s["mean_map"].shape == (cfg.depth, cfg.n_patches)
    for layer, att in enumerate(attns):
        a = vit.cls_patch_attention(att.double()).detach().numpy()  # (N, h, P)
        d = s["layers"][layer]
        h = -(a * np.log(a)).sum(-1)
        assert d["entropy"] == pytest.approx(h.mean(), rel=1e-9)
        assert d["eff_image"] == pytest.approx(np.exp(h).mean(), rel=1e-9)
        mean_map = a.mean(0)  # (h, P)
        assert d["eff_mean"] == pytest.approx(np.exp(-(mean_map * np.log(mean_map)).sum(-1)).mean(), rel=1e-9)
        assert d["fg_share"] == pytest.approx((a.mean(1) * fg).sum(-1).mean(), rel=1e-9)
        assert d["uniform"] == pytest.approx(fg.mean())
        assert d["top1_fg"] == pytest.approx(fg[np.arange(37), a.mean(1).argmax(-1)].mean())
        np.testing.assert_allclose(s["mean_map"][layer], mean_map.mean(0), rtol=1e-9)
        # averaging first can only spread the attention: the averaged map is never sparser
        assert d["eff_mean"] >= np.exp(h.mean(0)).min() - 1e-9


def test_uniform_attention_has_all_patches_effective():
    model = vit.ViT(small())
    with torch.no_grad():
        model.blocks[-1].attn.q.weight.zero_()
    x, y = bright_patch_data(12)
    s = runs.attention_statistics(
        model, x.numpy(), y.numpy(), vit.Normalizer.fit(x), runs.foreground_mask(x.numpy(), 4, 0.5)
    )
    d = s["layers"][-1]
    assert d["eff_image"] == pytest.approx(4) and d["eff_mean"] == pytest.approx(4)
    assert d["fg_share"] == pytest.approx(d["uniform"])


def test_log_points():
    assert runs.log_points(8, 2, 2, 4) == [0, 2, 4, 6, 8, 12, 16]


def test_verdicts_need_a_learned_model():
    collapsed = {"learned": False, "qk_growth": 80.0, "v_growth": 2.0, "eff_image": 1.5, "n_patches": 49}
    assert not vs.norm_verdict(collapsed) and not vs.sparsity_verdict(collapsed)
    ok = {**collapsed, "learned": True}
    assert vs.norm_verdict(ok) and vs.sparsity_verdict(ok)
    assert not vs.norm_verdict({**ok, "qk_growth": 4.9})
    assert not vs.norm_verdict({**ok, "v_growth": 80 / 2.9})
    assert not vs.sparsity_verdict({**ok, "eff_image": 24.6})
    assert vs.sparsity_verdict({**ok, "eff_image": 24.5})


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"dataset": "mnist"}, "dataset"),
        ({"n_validation": 0}, "n_validation"),
        ({"n_probe": 40}, "n_probe"),
        ({"map_epochs": (0, 3)}, "map_epochs"),
        ({"map_epochs": (2, 0)}, "map_epochs"),
        ({"map_epochs": ()}, "map_epochs"),
        ({"foreground": 1.5}, "foreground"),
        ({"split_seed": -1}, "split_seed"),
        ({"test": 1}, "test"),
        ({"logs_per_epoch": 0}, "logs_per_epoch"),
    ],
)
def test_bad_experiment_names_the_argument(kw, match):
    with pytest.raises(ValueError, match=f"Experiment.{match}"):
        replace(TINY, **kw)


def test_run_experiments_bad_arguments(tiny_data):
    with pytest.raises(ValueError, match="on_damage"):
        runs.run_experiments([TINY], on_damage="ignore")
    with pytest.raises(ValueError, match="workers"):
        runs.run_experiments([TINY], workers=0)
    with pytest.raises(ValueError, match="exps"):
        runs.run_experiments(["quick"])


# --------------------------------------------------------------------------- the cached experiment at tiny scale

TINY = runs.Experiment(
    dataset="fashion-mnist",
    model=small(n_classes=10, heads=1),
    train=vit.TrainConfig(epochs=2, batch_size=32, lr=5e-3, seed=0),
    n_validation=32,
    logs_per_epoch=2,
    logs_first_epoch=4,
    n_probe=16,
    map_epochs=(0, 2),
    foreground=0.1,
)


def tiny_arrays():
    return {"train": bright_patch_data(160, seed=0, classes=4), "test": bright_patch_data(64, seed=1, classes=4)}


@pytest.fixture
def tiny_data(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path))
    data = tiny_arrays()
    calls = []

    def fake(name, split):
        assert name == "fashion-mnist"
        calls.append(split)
        x, y = data[split]
        return x.numpy(), y.numpy().astype(np.int64)

    monkeypatch.setattr(runs.image_data, "load_images", fake)
    return tmp_path


def test_experiment_caches_and_reloads(tiny_data, monkeypatch):
    looks = []
    real = runs.attention_statistics
    monkeypatch.setattr(runs, "attention_statistics", lambda *a, **k: looks.append(len(a[1])) or real(*a, **k))
    r = runs.run_experiment(TINY)
    assert looks == [64], "the test split is looked at once, whole, after training"
    assert r.path.parent == tiny_data / "vit" and len(r.path.name) == 16
    for f in ("manifest.json", "history.json", "arrays.npz", "ckpt_epoch000.pt", "ckpt_epoch002.pt"):
        assert (r.path / f).is_file()
    manifest = json.loads((r.path / "manifest.json").read_text())
    assert manifest["name"] == "vit_sparsity" and manifest["key"] == r.path.name
    assert set(manifest["fingerprint"]) == {"code", "config", "data"}
    # 128 training images = 4 steps per epoch: every step in the first epoch, then every half epoch
    assert r.log["step"].tolist() == [0, 1, 2, 3, 4, 6, 8] and r.log["entropy"].shape == (7, 2)
    assert r.log["ov"].shape == (7, 2) and r.log["eff_mean"].shape == (7, 2)
    assert r.epoch_end.tolist() == [0, 4, 6] and r.val_acc.shape == (3,)
    assert r.probe_attention.shape == (2, 2, 16, 4)
    np.testing.assert_allclose(r.probe_attention.sum(-1), 1, atol=1e-5)
    assert r.probe_fg.shape == (16, 4) and r.probe_fg.any()
    # the probe comes from the validation split, not from the test split
    x_train = tiny_arrays()["train"][0].numpy()
    _, va = runs.split_indices(160, 32, 0)
    np.testing.assert_array_equal(r.probe_images, x_train[va[:16]])
    assert r.log["entropy"][0, -1] == pytest.approx(math.log(4), abs=0.05)
    assert r.test["acc"] >= 0 and len(r.test["layers"]) == 2 and r.test_mean_map.shape == (2, 4)

    def no_training(*a, **k):
        raise AssertionError("the cached run must not retrain")

    monkeypatch.setattr(runs, "train_into", no_training)
    again = runs.run_experiment(TINY)
    assert again.path == r.path
    for k in r.log:
        np.testing.assert_array_equal(r.log[k], again.log[k])
    np.testing.assert_array_equal(r.probe_attention, again.probe_attention)
    assert again.test == r.test
    # the checkpoint reproduces the stored maps
    model = runs.checkpoint(r, 2)
    _, attns = model(r.normalizer(torch.as_tensor(r.probe_images)), return_attention=True)
    np.testing.assert_allclose(
        vit.cls_patch_attention(attns[-1]).mean(1).detach().numpy(), r.probe_attention[1, -1], atol=1e-5
    )
    sc = vs.spread_check(r)
    assert sc["holds"].all() and sc["bound"].shape == (2,)
    with pytest.raises(ValueError, match="no checkpoint"):
        runs.checkpoint(r, 1)
    s = vs.seed_summary(r)
    assert s["n_patches"] == 4 and s["qk_growth"] > 0 and 1 <= s["eff_image"] <= 4 + 1e-9
    assert 1 <= s["eff_mean"] <= 4 + 1e-9 and 0 < s["uniform"] < 1 and s["seed"] == 0
    assert s["qk_growth"] == pytest.approx(r.log["qk"][-1, -1] / r.log["qk"][0, -1])


def test_a_run_without_the_test_split(tiny_data):
    r = runs.run_experiment(replace(TINY, test=False))
    assert r.test is None and r.test_mean_map is None
    with pytest.raises(ValueError, match="test split"):
        vs.seed_summary(r)


def test_key_changes_with_config_code_and_data():
    fp = runs.fingerprint(TINY, "data0")
    assert runs.cache_key(fp) == runs.cache_key(runs.fingerprint(TINY, "data0"))
    assert runs.cache_key(fp) != runs.cache_key(runs.fingerprint(TINY.with_seed(1), "data0"))
    assert runs.cache_key(fp) != runs.cache_key(
        runs.fingerprint(replace(TINY, model=replace(TINY.model, width=32)), "data0")
    )
    assert runs.cache_key(fp) != runs.cache_key(runs.fingerprint(TINY, "data1"))
    assert runs.cache_key(fp) != runs.cache_key({**fp, "code": "other"})


@pytest.mark.slow
def test_training_is_bit_identical_in_worker_processes(tiny_data, tmp_path):
    """Two seeds trained in two spawned processes give the same files as in this process."""
    exps = [TINY, TINY.with_seed(1)]
    parallel = runs.run_experiments(exps, workers=2)
    serial = []
    for r in parallel:
        shutil.rmtree(r.path)
    serial = runs.run_experiments(exps, workers=1)
    for a, b in zip(parallel, serial):
        assert a.path == b.path
        for k in a.log:
            np.testing.assert_array_equal(a.log[k], b.log[k])
        np.testing.assert_array_equal(a.probe_attention, b.probe_attention)
        assert a.test == b.test


# --------------------------------------------------------------------------- damaged caches


def _rewrite_manifest(path):
    """Re-record the checksums, as a forger (or a careless copy) would: only the structural checks remain."""
    m = json.loads((path / "manifest.json").read_text())
    m["files"] = {
        p.name: {"sha256": sha256_file(p), "bytes": p.stat().st_size}
        for p in sorted(path.iterdir())
        if p.name != "manifest.json"
    }
    (path / "manifest.json").write_text(json.dumps(m))


def _truncate(path, name):
    data = (path / name).read_bytes()
    (path / name).write_bytes(data[: len(data) // 2])


def _garbage(path, name):
    (path / name).write_bytes(b"this is not what it should be" * 10)


def _drop_array(path, key):
    with np.load(path / "arrays.npz") as z:
        arrays = {k: z[k] for k in z.files if k != key}
    np.savez_compressed(path / "arrays.npz", **arrays)


def _reshape_array(path, key):
    with np.load(path / "arrays.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays[key] = arrays[key][..., :-1]
    np.savez_compressed(path / "arrays.npz", **arrays)


def _edit_history(path, edit):
    h = json.loads((path / "history.json").read_text())
    edit(h)
    (path / "history.json").write_text(json.dumps(h))


DAMAGE = {
    "truncated history.json": (lambda p: _truncate(p, "history.json"), False, "history.json does not match"),
    "truncated history.json, manifest re-recorded": (
        lambda p: _truncate(p, "history.json"),
        True,
        "history.json is not readable JSON",
    ),
    "missing arrays.npz": (lambda p: (p / "arrays.npz").unlink(), False, "arrays.npz is missing"),
    "corrupt zip": (lambda p: _garbage(p, "arrays.npz"), False, "arrays.npz does not match"),
    "corrupt zip, manifest re-recorded": (lambda p: _garbage(p, "arrays.npz"), True, "arrays.npz cannot be read"),
    "missing array": (lambda p: _drop_array(p, "probe_fg"), True, "lacks probe_fg"),
    "wrong shape": (lambda p: _reshape_array(p, "probe_attention"), True, "probe_attention has shape"),
    "garbage checkpoint": (lambda p: _garbage(p, "ckpt_epoch002.pt"), False, "ckpt_epoch002.pt does not match"),
    "missing checkpoint": (lambda p: (p / "ckpt_epoch000.pt").unlink(), False, "ckpt_epoch000.pt is missing"),
    "missing manifest": (lambda p: (p / "manifest.json").unlink(), False, "manifest.json is missing"),
    "truncated manifest": (lambda p: _truncate(p, "manifest.json"), False, "manifest.json is not readable JSON"),
    "log of the wrong length": (lambda p: _edit_history(p, lambda h: h["log"]["qk"].pop()), True, "log\\['qk'\\]"),
    "test statistics lost": (lambda p: _edit_history(p, lambda h: h.update(test=None)), True, "test statistics"),
    "another configuration": (
        lambda p: _edit_history(p, lambda h: h["experiment"]["train"].update(lr=0.5)),
        True,
        "another configuration",
    ),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_cache_is_reported_then_rebuilt(tiny_data, case):
    damage, forge, match = DAMAGE[case]
    good = runs.run_experiment(TINY)
    damage(good.path)
    if forge:
        _rewrite_manifest(good.path)
    with pytest.raises(runs.CacheError, match=match) as info:
        runs.run_experiment(TINY, on_damage="raise")
    assert str(good.path) in str(info.value) and "retrain=True" in str(info.value)
    with pytest.warns(UserWarning, match="Rebuilding"):
        rebuilt = runs.run_experiment(TINY)
    assert rebuilt.path == good.path
    for k in good.log:
        np.testing.assert_array_equal(good.log[k], rebuilt.log[k])
    assert rebuilt.test == good.test
    runs.checkpoint(rebuilt, 2)


def test_garbage_checkpoint_never_gets_torch_advice(tiny_data, monkeypatch):
    r = runs.run_experiment(TINY)
    _garbage(r.path, "ckpt_epoch002.pt")
    with pytest.raises(runs.CacheError, match="does not match its recorded SHA-256"):
        runs.checkpoint(r, 2)
    _rewrite_manifest(r.path)
    with pytest.raises(runs.CacheError, match="not a checkpoint of this model") as info:
        runs.checkpoint(r, 2)
    assert "weights_only" not in str(info.value)
    seen = []
    real_load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: seen.append(k.get("weights_only")) or real_load(*a, **k))
    runs.checkpoint(runs.run_experiment(TINY, retrain=True), 0)
    assert seen == [True]


def test_swapped_cache_is_detected(tiny_data):
    a, b = runs.run_experiments([TINY, TINY.with_seed(1)], workers=1)
    shutil.rmtree(b.path)
    shutil.copytree(a.path, b.path)  # seed 0's run under seed 1's name
    with pytest.raises(runs.CacheError, match="copied or renamed"):
        runs.run_experiment(TINY.with_seed(1), on_damage="raise")
    with pytest.warns(UserWarning, match="Rebuilding"):
        again = runs.run_experiment(TINY.with_seed(1))
    assert again.seed == 1 and not np.array_equal(again.log["qk"], a.log["qk"])


def test_stale_fingerprint_and_foreign_cache(tiny_data):
    r = runs.run_experiment(TINY)
    fp = json.loads((r.path / "manifest.json").read_text())["fingerprint"]
    with pytest.raises(runs.CacheError, match="another code"):
        runs.load(r.path, TINY, {**fp, "code": "0" * 64})
    with pytest.raises(runs.CacheError, match="another data"):
        runs.load(r.path, TINY, {**fp, "data": "0" * 64})
    m = json.loads((r.path / "manifest.json").read_text())
    (r.path / "manifest.json").write_text(json.dumps({**m, "name": "real_reviews"}))
    with pytest.raises(runs.CacheError, match="names 'real_reviews'"):
        runs.load(r.path)
    (r.path / "manifest.json").write_text(json.dumps({**m, "version": 1}))
    with pytest.raises(runs.CacheError, match="cache version 1"):
        runs.load(r.path)
    with pytest.raises(runs.CacheMissing):
        runs.load(r.path.parent / "0123456789abcdef")


def test_leftovers_are_swept(tiny_data):
    r = runs.run_experiment(TINY)
    root = r.path.parent
    dead = root / f"{r.path.name}.tmp-999999999"
    dead.mkdir()
    (dead / "history.json").write_text("{")
    alive = root / f"{r.path.name}.tmp-{os.getppid()}"
    alive.mkdir()
    for f in (root / "arrays.npz.part", root / "x.tmp", r.path / "ckpt_epoch000.pt.part", r.path / "a.tmp"):
        f.write_bytes(b"partial")
    removed = runs.sweep_leftovers(root)
    assert sorted(p.name for p in removed) == sorted(
        [dead.name, "arrays.npz.part", "x.tmp", "ckpt_epoch000.pt.part", "a.tmp"]
    )
    assert alive.is_dir() and not dead.exists()
    assert runs.run_experiment(TINY).path == r.path  # the run itself is untouched
    shutil.rmtree(alive)


def test_wrong_image_shape_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path))
    x = np.zeros((64, 1, 28, 28), np.uint8)
    monkeypatch.setattr(runs.image_data, "load_images", lambda name, split: (x, np.zeros(64, np.int64)))
    with pytest.raises(ValueError, match="the model expects"):
        runs.run_experiment(TINY)
    assert not list((tmp_path / "vit").glob("*"))


# --------------------------------------------------------------------------- the study, its plots, the tuning record


def test_plots_draw_from_a_tiny_study(tiny_data):
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    r0, r1, s0, c0 = runs.run_experiments(
        [
            TINY,
            TINY.with_seed(1),
            replace(TINY, train=replace(TINY.train, lr=5e-4)),
            replace(TINY, test=False, train=replace(TINY.train, lr=5e-2, epochs=1), map_epochs=None),
        ],
        workers=1,
    )
    study = vs.Study(seeds={0: r0, 1: r1}, smaller_lr={0: s0}, collapse={0: c0})
    v = vs.validation_summary(c0)
    assert v["val_acc"] == c0.val_acc[-1] and v["eff_image"] == c0.log["eff"][-1, -1]
    table = vs.seed_table(study.seeds)
    assert list(table.index) == [0, 1] and {"test_acc", "qk_growth", "v_growth", "eff_mean"} <= set(table)
    for fig in (
        vs.plot_training(study),
        vs.plot_attention_maps(r0),
        vs.plot_norms(study),
        vs.plot_sparsity(study),
        vs.plot_where(study),
    ):
        drawn = [ax for ax in fig.axes if ax.get_visible()]
        assert drawn and all(ax.has_data() for ax in drawn), fig  # every visible panel shows something
        plt.close(fig)
    assert set(vs.FIGURES) == {"fig-vit-training", "fig-vit-maps", "fig-vit-norms", "fig-vit-sparsity", "fig-vit-where"}


def test_cifar_like_experiment_runs(tmp_path, monkeypatch):
    """The paper-scale code path (3 channels, augmentation, no foreground rule) at tiny size."""
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path))
    g = torch.Generator().manual_seed(0)
    data = {
        s: (
            torch.randint(0, 256, (n, 3, 8, 8), generator=g, dtype=torch.uint8).numpy(),
            torch.randint(0, 10, (n,), generator=g).numpy(),
        )
        for s, n in (("train", 80), ("test", 16))
    }
    monkeypatch.setattr(runs.image_data, "load_images", lambda name, split: data[split])
    exp = runs.Experiment(
        dataset="cifar-10",
        model=small(channels=3, n_classes=10),
        train=vit.TrainConfig(epochs=1, batch_size=16, lr=1e-3, augment=True, grad_clip=1.0, threads=None),
        n_validation=16,
        logs_per_epoch=1,
        logs_first_epoch=2,
        n_probe=8,
        foreground=None,
    )
    r = runs.run_experiment(exp)
    assert r.classes[0] == "airplane" and r.probe_images.shape == (8, 3, 8, 8)
    assert not r.probe_fg.any() and r.log["step"].tolist() == [0, 2, 4]
    assert r.experiment.epochs_mapped == (0, 1) and r.probe_attention.shape[0] == 2
    fig = vs.plot_attention_maps(r, n_examples=3)
    rows = len(vs.example_indices(r, 3))
    assert rows >= 1 and len(fig.axes) == rows * 3 and all(ax.images for ax in fig.axes)  # image + 2 stored epochs
    import matplotlib.pyplot as plt

    plt.close(fig)


@pytest.mark.slow
def test_a_failing_worker_is_reported(tiny_data):
    x = np.zeros((64, 1, 28, 28), np.uint8)
    raw = runs.RawData(
        "fashion-mnist",
        x,
        np.zeros(64, np.int64),
        x[:8],
        np.zeros(8, np.int64),
        runs.data_digest(x, np.zeros(64, np.int64), x[:8], np.zeros(8, np.int64)),
    )
    jobs = [
        (e, raw, tiny_data / "vit" / f"job{i}", runs.fingerprint(e, raw.fingerprint))
        for i, e in enumerate([TINY, TINY.with_seed(1)])
    ]
    with pytest.raises(RuntimeError, match="the model expects"):
        runs.train_in_processes(jobs, workers=2)


def test_the_study_is_judged_on_held_out_seeds_and_the_controls_never_see_test_data():
    groups = vs.controls("quick")
    assert [e.train.seed for e in groups["seeds"]] == list(vs.HELD_OUT_SEEDS) == [10, 11, 12]
    assert all(e.test for e in groups["seeds"]) and groups["seeds"][0] == vs.QUICK
    (small,) = groups["smaller_lr"]
    assert small.train.lr == pytest.approx(vs.QUICK.train.lr / vs.SMALLER_LR)
    assert small == replace(vs.QUICK, train=replace(vs.QUICK.train, lr=small.train.lr))
    (broken,) = groups["collapse"]
    assert not broken.test and broken.train.seed in vs.DEV_SEEDS and broken.train.epochs == 1
    assert not set(vs.DEV_SEEDS) & set(vs.HELD_OUT_SEEDS)


def test_the_recipe_is_the_one_the_validation_record_chooses():
    """QUICK is the rule's choice from the record, and the record matches the candidates' current configurations."""
    cands = vt.tuning_candidates()
    seeds = set()
    for row in vt.TUNING_RECORD:
        assert row["seed"] in vs.DEV_SEEDS and row["seed"] not in vs.HELD_OUT_SEEDS
        exp = cands[row["label"]].with_seed(row["seed"])
        assert not exp.test, "tuning never looks at the test split"
        assert vt.config_digest(exp) == row["config"], f"{row['label']}: the candidate changed since it was tuned"
        assert len(row["val_acc"]) == exp.train.epochs + 1
        seeds.add(row["seed"])
    assert seeds == set(vt.TUNING_SEEDS) and set(cands) == {r["label"] for r in vt.TUNING_RECORD}
    chosen = vt.choose()
    assert replace(cands[chosen], test=True).with_seed(vs.HELD_OUT_SEEDS[0]) == vs.QUICK
    table = vt.tuning_table()
    assert table.loc[chosen, "cpu_seconds"] <= vt.CPU_BUDGET
    within = table[table["cpu_seconds"] <= vt.CPU_BUDGET]
    assert table.loc[chosen, "worst"] == within["worst"].max()


def test_choose_needs_a_candidate_within_budget():
    rows = [
        {"label": "a", "seed": 0, "val_acc": [0.1, 0.9], "cpu_seconds": 500.0},
        {"label": "b", "seed": 0, "val_acc": [0.1, 0.8], "cpu_seconds": 100.0},
        {"label": "b", "seed": 1, "val_acc": [0.1, 0.7], "cpu_seconds": 110.0},
        {"label": "c", "seed": 0, "val_acc": [0.1, 0.75], "cpu_seconds": 100.0},
        {"label": "c", "seed": 1, "val_acc": [0.1, 0.74], "cpu_seconds": 100.0},
    ]
    assert vt.choose(rows, budget=200) == "c"  # best worst seed within budget
    assert vt.choose(rows, budget=1000) == "c"  # "a" was trained on one seed only: no worst seed
    assert vt.choose(rows + [{**rows[0], "seed": 1}], budget=1000) == "a"
    with pytest.raises(ValueError, match="budget"):
        vt.choose(rows, budget=10)


def test_tune_refuses_held_out_seeds_and_unknown_labels():
    with pytest.raises(ValueError, match="held-out"):
        vt.tune(["lr 1e-3"], seeds=[0, 10])
    with pytest.raises(ValueError, match="TUNING_GRID"):
        vt.tune(["lr 42"])
