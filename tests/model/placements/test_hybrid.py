"""The hybrid placement (normexp/model/placements/hybrid.py, configs/placement/hybrid.yaml): its
formulas against hand computations. SHAPE and SETTINGS, worked out by hand, are read by the
tests every placement passes (tests/model/test_placements.py, test_wiring, test_presets) through
tests/conftest.py's `placement_expectations`."""

import torch

from model_helpers import D, EPS, StandIn, randomize, ln, make_ln, heads, attend, projections, randomize_biases
from normexp.model import GPT, NORMS, PLACEMENTS, ModelConfig
from normexp.model.layers import CausalSelfAttention


# (norms per block, whether the model adds a final norm); q, k, v norms + the MLP's
SHAPE = (4, True)
# its resolved settings at 2 blocks (summary.json's placement_settings): Q, K, V normalized over the
# full width (the authors' code: per_head)
SETTINGS = {"qkv_norm": "full"}


def test_hybrid_attention_normalizes_q_k_v_and_has_no_input_norm():
    """Y = X + W_O·softmax(LN(Q)·LN(K)ᵀ/√d_h)·LN(V), Q, K, V each normalized over the full width."""
    torch.manual_seed(0)
    attn = randomize_biases(CausalSelfAttention(ModelConfig(d_model=D, heads=2)))
    layer = PLACEMENTS["hybrid"](attn, make_ln, index=0, depth=4, qkv_norm="full")
    assert len(attn.qkv_norm) == 3 and not hasattr(layer, "norm")
    for norm in attn.qkv_norm:
        randomize(norm)
    x = torch.randn(2, 6, D) * 3
    q, k, v = (heads(ln(t, norm), 2) for t, norm in zip(projections(attn, x), attn.qkv_norm))
    out = attend(q, k, v) @ attn.proj.weight.t() + attn.proj.bias
    y, got = layer(x)
    torch.testing.assert_close(got, out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(y, x + out, atol=1e-5, rtol=1e-5)


def test_hybrid_mlp_is_post_norm_with_the_normalized_residual():
    """X' = LN(Y) + FFN(LN(Y))."""
    torch.manual_seed(0)
    f = StandIn()
    layer = PLACEMENTS["hybrid"](f, make_ln, index=0, depth=4, qkv_norm="full")
    x = torch.randn(2, 5, D) * 3
    h = ln(x, layer.norm)
    y, out = layer(x)
    torch.testing.assert_close(out, f(h), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(y, h + f(h), atol=1e-5, rtol=1e-5)
    model = GPT(ModelConfig(layers=2, d_model=D, heads=2, seq_len=8, placement="hybrid"))
    assert type(model.final_norm) is NORMS["layer"]  # X' is not normalized: a final norm


def test_hybrid_per_head_normalizes_each_heads_features_on_their_own():
    """qkv_norm=per_head (the authors' code): Q, K, V split into heads, each head's d_head
    features normalized with one d_head-wide LN shared by the heads, then attention."""
    torch.manual_seed(0)
    attn = randomize_biases(CausalSelfAttention(ModelConfig(d_model=D, heads=2)))
    layer = PLACEMENTS["hybrid"](attn, lambda width=D: randomize(NORMS["layer"](width, eps=EPS)), index=0, depth=4,
                                 qkv_norm="per_head")
    norms = [m.norm for m in attn.qkv_norm]
    assert all(n.weight.shape == (D // 2,) for n in norms)
    x = torch.randn(2, 6, D) * 3
    q, k, v = (ln(heads(t, 2), norm) for t, norm in zip(projections(attn, x), norms))  # over d_head
    out = attend(q, k, v) @ attn.proj.weight.t() + attn.proj.bias
    y, got = layer(x)
    torch.testing.assert_close(got, out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(y, x + out, atol=1e-5, rtol=1e-5)
    # and it differs from the full-width form on the same weights
    full = PLACEMENTS["hybrid"](attn, make_ln, index=0, depth=4, qkv_norm="full")
    assert not torch.allclose(full(x)[0], y, atol=1e-3)
