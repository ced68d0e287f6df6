"""The model against independent references: torch.nn norms, the final norm where the stream
is not normalized, the tied head and causality, and the init-scale formulas. (Each placement's
formulas are in its own file in placements/.)"""

import math

import pytest
import torch
import torch.nn as nn

from normexp.model import GPT, NORMS, ModelConfig

from model_helpers import D, randomize

torch.manual_seed(0)


def test_layernorm_matches_torch():
    ours = randomize(NORMS["layer"](D, eps=1e-5))
    ref = nn.LayerNorm(D, eps=1e-5)
    ref.load_state_dict({"weight": ours.weight.data, "bias": ours.bias.data})
    x = torch.randn(4, 7, D) * 3 + 1
    torch.testing.assert_close(ours(x), ref(x), atol=1e-6, rtol=1e-6)
    # and the biased-variance formula written out
    mu, var = x.mean(-1, keepdim=True), x.var(-1, unbiased=False, keepdim=True)
    torch.testing.assert_close(ours(x), ours.weight * (x - mu) / torch.sqrt(var + 1e-5) + ours.bias, atol=1e-5, rtol=1e-5)


def test_rmsnorm_matches_torch():
    ours = randomize(NORMS["rms"](D, eps=1e-6))
    ref = nn.RMSNorm(D, eps=1e-6)
    ref.load_state_dict({"weight": ours.weight.data})
    x = torch.randn(4, 7, D) * 3
    torch.testing.assert_close(ours(x), ref(x), atol=1e-6, rtol=1e-6)
    # a bf16 module: the statistic is computed in float32, the output is bf16
    xb = x.bfloat16()
    out = ours.bfloat16()(xb)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ref(xb.float()), atol=0.05, rtol=0.02)


def test_batchnorm_matches_batchnorm1d_over_all_tokens():
    ours = randomize(NORMS["batch"](D, eps=1e-5, momentum=0.1))
    ref = nn.BatchNorm1d(D, eps=1e-5, momentum=0.1)
    ref.load_state_dict(ours.bn.state_dict())
    x = torch.randn(4, 7, D) * 2 + 0.5
    # training: statistics over all B*T tokens per feature
    torch.testing.assert_close(ours(x), ref(x.reshape(-1, D)).view(4, 7, D), atol=1e-6, rtol=1e-6)
    flat = x.reshape(-1, D)
    by_hand = (flat - flat.mean(0)) / torch.sqrt(flat.var(0, unbiased=False) + 1e-5)
    w, b = ours.bn.weight, ours.bn.bias
    torch.testing.assert_close(ours(x), (by_hand * w + b).view(4, 7, D), atol=1e-5, rtol=1e-5)
    # the running statistics follow BatchNorm1d's update (ours saw x twice above)
    ref(x.reshape(-1, D))
    torch.testing.assert_close(ours.bn.running_var, ref.running_var, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(ours.bn.running_mean, flat.mean(0) * (1 - 0.9 ** 2), atol=1e-6, rtol=1e-5)
    # eval: running statistics, the same as BatchNorm1d's
    ours.eval(), ref.eval()
    torch.testing.assert_close(ours(x), ref(x.reshape(-1, D)).view(4, 7, D), atol=1e-6, rtol=1e-6)


def test_dyt_and_none_follow_their_formulas():
    dyt = randomize(NORMS["dyt"](D, init_alpha=0.5))
    x = torch.randn(3, 5, D)
    torch.testing.assert_close(dyt(x), dyt.weight * torch.tanh(dyt.alpha * x) + dyt.bias, atol=1e-6, rtol=1e-6)
    assert NORMS["dyt"](D, init_alpha=0.5).alpha.item() == 0.5
    assert torch.equal(NORMS["none"](D)(x), x)


def test_final_norm_only_where_the_stream_is_not_normalized():
    for placement, has_final in [("pre", True), ("sandwich", True), ("mix", True), ("post", False), ("deepnorm", False)]:
        model = GPT(ModelConfig(layers=4, d_model=D, heads=2, seq_len=8, placement=placement))
        assert isinstance(model.final_norm, nn.Identity) != has_final, placement


def test_tied_head_and_causality():
    model = GPT(ModelConfig(layers=2, d_model=D, heads=2, seq_len=8)).eval()
    x = torch.randint(0, 256, (1, 8))
    logits, _ = model(x)
    x2 = x.clone()
    x2[0, 5:] = (x2[0, 5:] + 1) % 256  # change the future
    logits2, _ = model(x2)
    torch.testing.assert_close(logits[0, :5], logits2[0, :5])  # the past does not see it
    h = model.hidden(x)
    torch.testing.assert_close(logits, h @ model.tok_emb.weight.t())


def _std_ok(w: torch.Tensor, expected: float) -> bool:
    # the sample std of n draws has relative standard error ≈ 1/√(2n) (normal) or √(1/5n)
    # (uniform); allow 5 normal ones, which also covers the uniform's
    return abs(w.std().item() / expected - 1) < 5 / math.sqrt(2 * w.numel())


def _uniform_ok(w: torch.Tensor, bound: float) -> bool:
    """Inside ±bound, reaching near it, and with the std of U(±bound), bound/√3."""
    return (w.abs().max().item() <= bound * (1 + 1e-6) and w.abs().max().item() > 0.9 * bound
            and _std_ok(w, bound / math.sqrt(3)))


@pytest.mark.parametrize("placement", ["post", "deepnorm"])
def test_torchscale_init_draws_nn_linear_defaults_and_deepnorm_divides_them(placement):
    """torchscale 0.3's Decoder keeps every nn.Linear at its default, U(±1/√fan_in) for weight
    and bias (PyTorch's nn.Linear docs; MultiheadAttention.reset_parameters is never called):
    q, k, v, out and fc1 have fan_in d, fc2 4d. Under DeepNorm the weights and biases of v, out,
    fc1 and fc2 are divided by (8N)^¼ (REFERENCE.md), q and k untouched. Embeddings N(0, 1/d)."""
    d, layers = 256, 12
    beta = (8 * layers) ** -0.25 if placement == "deepnorm" else 1.0
    torch.manual_seed(0)
    model = GPT(ModelConfig(layers=layers, d_model=d, heads=4, seq_len=64, placement=placement,
                            init={"name": "torchscale", "scale_positions": False}))
    attn, mlp = model.blocks[5].attn.sublayer, model.blocks[5].mlp.sublayer
    (q, k, v), (bq, bk, bv) = attn.qkv.weight.detach().split(d), attn.qkv.bias.detach().split(d)
    bounds = [(q, bq, 1 / math.sqrt(d)), (k, bk, 1 / math.sqrt(d)), (v, bv, beta / math.sqrt(d)),
              (attn.proj.weight, attn.proj.bias, beta / math.sqrt(d)),
              (mlp.fc_in.weight, mlp.fc_in.bias, beta / math.sqrt(d)),
              (mlp.fc_out.weight, mlp.fc_out.bias, beta / math.sqrt(4 * d))]
    for i, (w, b, bound) in enumerate(bounds):
        assert _uniform_ok(w.detach(), bound), (placement, i, w.std().item(), bound / math.sqrt(3))
        assert b.abs().max().item() <= bound * (1 + 1e-6) and b.abs().max().item() > 0.8 * bound, (placement, i)
        assert b.abs().mean().item() == pytest.approx(bound / 2, rel=0.25), (placement, i)  # E|U(±a)| = a/2
    for table in (model.tok_emb.weight, model.pos_emb.weight):
        assert _std_ok(table.detach(), d ** -0.5)


def test_scale_positions_says_what_the_embedding_scale_multiplies():
    """tok·√d + pos under init=torchscale (fairseq's and torchscale's forward_embedding), and
    (tok + pos)·√d by default (Vaswani et al. 2017), written out by hand; the setting can be
    flipped on either, and a non-boolean is a ConfigError naming it."""
    from normexp.config.compose import compose_config
    from normexp.config.checks import ConfigError

    idx = torch.randint(0, 256, (2, 8))
    for overrides, scaled in ((["init=torchscale"], False), (["init=xavier"], True),
                              (["init=torchscale", "init.scale_positions=true"], True),
                              (["init=xavier", "init.scale_positions=false"], False)):
        model = GPT(ModelConfig.from_composed(compose_config([*overrides, f"d_model={D}", "heads=2", "layers=2", "seq_len=8"]), 256))
        tok, pos = model.tok_emb(idx), model.pos_emb(torch.arange(8))
        expected = (tok + pos) * math.sqrt(D) if scaled else tok * math.sqrt(D) + pos
        torch.testing.assert_close(model.embed(idx), expected)
        with torch.no_grad():  # and it is what the first block receives
            from normexp.model import read_outputs
            with read_outputs({"embed": model.readouts()["embed"]}) as read:
                model(idx)
        torch.testing.assert_close(read["embed"][0], expected)
    with pytest.raises(ConfigError, match="init.scale_positions"):
        GPT(ModelConfig(d_model=D, heads=2, layers=1, seq_len=8, init={"name": "torchscale", "scale_positions": "yes"}))


