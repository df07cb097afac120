"""mmtoken.vit, the small ViT: shapes, attention rows, key-query and value-output matrices, training pieces."""

from __future__ import annotations

import math

import pytest
import torch
from toy_vit import bright_patch_data, small

from mmtoken import vit
from mmtoken.chapters import ch09_vit_sparsity as vs

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
    exp = vs.experiment(vs.settings("paper"))
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
