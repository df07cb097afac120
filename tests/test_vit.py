"""The small ViT: shapes, attention rows, key-query matrices, training and the cached experiment at tiny scale."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from mmtoken import vit
from mmtoken.experiments import vit_sparsity as vs


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


@pytest.mark.parametrize("kw, match", [({"patch": 3}, "does not divide image_size"),
                                       ({"heads": 3}, "does not divide width"),
                                       ({"depth": 0}, "positive"), ({"init_std": 0.0}, "init_std")])
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
    W = attn.key_query_matrices().detach()              # (h, d, d)
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
        x[i, 0, r * patch:(r + 1) * patch, c * patch:(c + 1) * patch] = 250
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
        vit.train(model, x, y, cfg, norm, log_points=[0, 8, 80], on_log=lambda s, e, l: calls.append((s, e, l)))
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
    loss = torch.nn.functional.cross_entropy(model(vit.Normalizer([0.5] * 3, [0.25] * 3)(vit.augment(x, torch.Generator()))),
                                             torch.tensor([1, 2]))
    loss.backward()
    assert math.isfinite(loss.item())


# --------------------------------------------------------------------------- the cached experiment at tiny scale

TINY = vs.Experiment(dataset="fashion-mnist", model=small(n_classes=10, heads=1),
                     train=vit.TrainConfig(epochs=2, batch_size=32, lr=5e-3, seed=0),
                     logs_per_epoch=2, logs_first_epoch=4, n_probe=16, map_epochs=(0, 2), foreground=0.1)


@pytest.fixture
def tiny_data(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path))
    data = {"train": bright_patch_data(128, seed=0, classes=4), "test": bright_patch_data(64, seed=1, classes=4)}

    def fake(name, split):
        assert name == "fashion-mnist"
        x, y = data[split]
        return x.numpy(), y.numpy().astype(np.int64)

    monkeypatch.setattr(vs.image_data, "load_images", fake)
    return tmp_path


def test_experiment_caches_and_reloads(tiny_data, monkeypatch):
    r = vs.run_experiment(TINY)
    assert r.path == tiny_data / "vit" / TINY.key()
    for f in ("history.json", "arrays.npz", "ckpt_epoch000.pt", "ckpt_epoch002.pt"):
        assert (r.path / f).is_file()
    # 4 steps per epoch: every step in the first epoch, then every half epoch
    assert r.log["step"].tolist() == [0, 1, 2, 3, 4, 6, 8] and r.log["entropy"].shape == (7, 2)
    assert r.epoch_end.tolist() == [0, 4, 6] and r.test_acc.shape == (3,)
    assert r.probe_attention.shape == (2, 2, 16, 4)
    np.testing.assert_allclose(r.probe_attention.sum(-1), 1, atol=1e-5)
    assert r.fg_mask.shape == (16, 4) and r.fg_mask.any()
    # uniform attention at initialisation: entropy close to log P
    assert r.log["entropy"][0, -1] == pytest.approx(math.log(4), abs=0.05)
    assert 0 <= r.log["fg_share"].min() and r.log["fg_share"].max() <= 1

    def no_training(*a, **k):
        raise AssertionError("the cached run must not retrain")

    monkeypatch.setattr(vs, "_train_and_save", no_training)
    again = vs.run_experiment(TINY)
    for k in r.log:
        np.testing.assert_array_equal(r.log[k], again.log[k])
    np.testing.assert_array_equal(r.probe_attention, again.probe_attention)
    # the checkpoint reproduces the stored maps
    model = vs.checkpoint(r, 2)
    norm = vit.Normalizer.fit(torch.as_tensor(bright_patch_data(128, seed=0, classes=4)[0]))
    _, attns = model(norm(torch.as_tensor(r.probe_images)), return_attention=True)
    np.testing.assert_allclose(vit.cls_patch_attention(attns[-1]).mean(1).detach().numpy(),
                               r.probe_attention[1, -1], atol=1e-5)
    sc = vs.spread_check(r)
    assert sc["holds"].all() and sc["bound"].shape == (2,)
    with pytest.raises(ValueError, match="no checkpoint"):
        vs.checkpoint(r, 1)
    s = vs.sparsity_summary(r)
    assert s["n_patches"] == 4 and -1 <= s["spearman_all"] <= 1 and s["norm_ratio"] > 0
    fs = vs.foreground_summary(r)
    assert 0 < fs["uniform"] < 1 and 0 <= fs["fg_share"] <= 1 and 0 <= fs["top1_fg"] <= 1
    assert 1 <= fs["eff_per_image"] <= 4 + 1e-9 and 1 <= fs["eff_mean_map"] <= 4 + 1e-9


def test_spearman_is_exact_at_the_threshold():
    # four points, one adjacent swap: exactly -0.8 (scipy's float result is -0.7999999999999999)
    assert vs.spearman([3.9, 1.92, 1.79, 1.97], [0.16, 11.26, 11.99, 11.31]) == -0.8
    assert vs.spearman([1, 2, 3], [3, 2, 1]) == -1.0


def test_experiment_key_changes_with_config():
    assert TINY.key() != replace(TINY, train=replace(TINY.train, seed=1)).key()
    assert TINY.key() != replace(TINY, model=replace(TINY.model, width=32)).key()
    assert TINY.key() == vs.Experiment(**{f: getattr(TINY, f) for f in TINY.__dataclass_fields__}).key()


def test_plots_draw_from_a_tiny_run(tiny_data):
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    r = vs.run_experiment(TINY)
    for plot in (vs.plot_training, vs.plot_attention_maps, vs.plot_sparsity, vs.plot_where):
        fig = plot(r)
        assert fig.axes
        plt.close(fig)
    assert set(vs.FIGURES) == {"fig-vit-training", "fig-vit-maps", "fig-vit-sparsity", "fig-vit-where"}


def test_cifar_like_experiment_runs(tmp_path, monkeypatch):
    """The paper-scale code path (3 channels, augmentation, no foreground rule) at tiny size."""
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path))
    g = torch.Generator().manual_seed(0)
    data = {s: (torch.randint(0, 256, (n, 3, 8, 8), generator=g, dtype=torch.uint8).numpy(),
                torch.randint(0, 10, (n,), generator=g).numpy()) for s, n in (("train", 64), ("test", 16))}
    monkeypatch.setattr(vs.image_data, "load_images", lambda name, split: data[split])
    exp = vs.Experiment(dataset="cifar-10", model=small(channels=3, n_classes=10),
                        train=vit.TrainConfig(epochs=1, batch_size=16, lr=1e-3, augment=True, grad_clip=1.0,
                                              threads=None),
                        logs_per_epoch=1, logs_first_epoch=2, n_probe=8, map_epochs=(0, 1), foreground=None)
    r = vs.run_experiment(exp)
    assert r.classes[0] == "airplane" and r.probe_images.shape == (8, 3, 8, 8)
    assert not r.fg_mask.any() and r.log["step"].tolist() == [0, 2, 4]
    fig = vs.plot_attention_maps(r, n_examples=3)
    import matplotlib.pyplot as plt
    plt.close(fig)


def test_wrong_image_shape_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setenv("MMTOKEN_DATA", str(tmp_path))
    x = np.zeros((32, 1, 28, 28), np.uint8)
    monkeypatch.setattr(vs.image_data, "load_images", lambda name, split: (x, np.zeros(32, np.int64)))
    with pytest.raises(ValueError, match="the model expects"):
        vs.run_experiment(TINY)
    assert not list((tmp_path / "vit").glob("*"))
