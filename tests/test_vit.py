"""mmtoken.vision.vit, the small ViT: shapes, attention rows, key-query and value-output matrices, attention statistics."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from toy_vit import bright_patch_data, small

from mmtoken.vision import vit, vit_train

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


def test_entropy():
    p = torch.tensor([[0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0]])
    torch.testing.assert_close(vit.entropy(p), torch.tensor([math.log(4), 0.0]))


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


# --------------------------------------------------------------------------- attention statistics


def test_effective_patches():
    np.testing.assert_allclose(vit.effective_patches(np.full((2, 8), 1 / 8)), [8, 8])
    np.testing.assert_allclose(vit.effective_patches(np.eye(3)), [1, 1, 1])
    np.testing.assert_allclose(vit.effective_patches([0.5, 0.5, 0, 0]), 2)


def test_attention_statistics_against_a_direct_computation():
    torch.manual_seed(5)
    cfg = small(heads=2, init_std=0.5, n_classes=4)
    model = vit.ViT(cfg)
    x, y = bright_patch_data(37, seed=2, classes=4)
    norm = vit_train.Normalizer.fit(x)
    fg = vit.foreground_mask(x.numpy(), cfg.patch, 0.5)
    s = vit.attention_statistics(model, x.numpy(), y.numpy(), norm, fg, batch_size=10)  # 4 uneven batches
    logits, attns = model(norm(x), return_attention=True)
    loss, acc = vit_train.evaluate(model, x, y, norm)
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
    s = vit.attention_statistics(
        model, x.numpy(), y.numpy(), vit_train.Normalizer.fit(x), vit.foreground_mask(x.numpy(), 4, 0.5)
    )
    d = s["layers"][-1]
    assert d["eff_image"] == pytest.approx(4) and d["eff_mean"] == pytest.approx(4)
    assert d["fg_share"] == pytest.approx(d["uniform"])
