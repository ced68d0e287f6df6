"""The placements and norms of issue 21 against hand computations: Sub-LN (Magneto),
ResiDual, HybridNorm, the GTrXL gate, ScaleNorm, and soft-capped attention and output logits.
Each formula is written out here from the paper, with the module's own weights."""

import math

import pytest
import torch
import torch.nn.functional as F

from model_helpers import D, StandIn, randomize  # F(x) = tanh(x @ W), width D = 16

from normexp.launch.preflight import check_job
from normexp.config.compose import compose_config
from normexp.train.instruments import Instruments, attention_signals, recording
from normexp.model import GPT, NORMS, PLACEMENTS, ModelConfig
from normexp.config.registry import build
from normexp.model.layers import ACT_SCALE, CausalSelfAttention, CrossAttention, INNER_NORM, K_NORM, MLP, QKV_NORM, Q_NORM
from normexp.config.checks import ConfigError

EPS = 1e-5


def ln(x, norm=None):
    """LayerNorm written out: biased variance, the norm's γ and β if given."""
    y = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + EPS)
    return y if norm is None else y * norm.weight + norm.bias


def make_ln(width=D):
    return randomize(build(NORMS, "norm", "layer", width))


def heads(t, h):
    B, T, C = t.shape
    return t.view(B, T, h, C // h).transpose(1, 2)


def attend(q, k, v, cap=None):
    """softmax(q·kᵀ/√d_h, capped as c·tanh(z/c) if cap, causal) · v, heads merged back."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if cap is not None:
        scores = cap * torch.tanh(scores / cap)
    T = q.shape[-2]
    scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    y = torch.softmax(scores, -1) @ v
    return y.transpose(1, 2).reshape(q.shape[0], T, -1)


def projections(attn, x):
    return (x @ attn.qkv.weight.t() + attn.qkv.bias).split(attn.d_model, dim=-1)


def randomize_biases(module):
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.copy_(torch.randn_like(p) * 0.1)
    return module


# ------------------------------------------------------------------------------ Sub-LN

def test_subln_puts_a_norm_before_each_output_projection():
    """x ← x + F'(LN(x)): attention W_O·LN(heads' output); MLP W₂·LN(GELU(W₁·h)), 4d wide."""
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=D, heads=2)
    attn = randomize_biases(CausalSelfAttention(cfg))
    layer = PLACEMENTS["subln"](attn, make_ln, index=0, depth=6)
    assert attn.inner_norm.weight.shape == (D,)
    randomize(attn.inner_norm)
    x = torch.randn(2, 5, D) * 3
    h = ln(x, layer.norm)
    q, k, v = (heads(t, 2) for t in projections(attn, h))
    out = ln(attend(q, k, v), attn.inner_norm) @ attn.proj.weight.t() + attn.proj.bias
    y, got = layer(x)
    torch.testing.assert_close(got, out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(y, x + out, atol=1e-5, rtol=1e-5)

    mlp = randomize_biases(MLP(cfg))
    layer = PLACEMENTS["subln"](mlp, make_ln, index=0, depth=6)
    assert mlp.inner_norm.weight.shape == (4 * D,)  # the MLP's inner width
    randomize(mlp.inner_norm)
    h = ln(x, layer.norm)
    inner = F.gelu(h @ mlp.fc_in.weight.t() + mlp.fc_in.bias)
    out = ln(inner, mlp.inner_norm) @ mlp.fc_out.weight.t() + mlp.fc_out.bias
    y, got = layer(x)
    torch.testing.assert_close(y, x + out, atol=1e-5, rtol=1e-5)
    # and without Sub-LN the slots stay empty: no norm is called
    assert CausalSelfAttention(cfg).inner_norm is None and MLP(cfg).inner_norm is None


def test_placements_fill_only_the_slots_a_sublayer_declares():
    """The slots are declared (`norm_slots`), not probed: Sub-LN around cross-attention (no
    slot) adds no inner norm and still computes Pre-LN; HybridNorm around the MLP (no QKV slot)
    takes the FFN form; filling an undeclared slot is refused."""
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=D, heads=2)
    assert CausalSelfAttention(cfg).norm_slots == {INNER_NORM, QKV_NORM, Q_NORM, K_NORM}
    assert MLP(cfg).norm_slots == {INNER_NORM, ACT_SCALE}
    cross = CrossAttention(cfg)
    assert cross.norm_slots == frozenset()
    layer = PLACEMENTS["subln"](cross, make_ln, index=0, depth=6)
    assert not hasattr(cross, "inner_norm") and sum(isinstance(m, NORMS["layer"]) for m in layer.modules()) == 1
    x, memory = torch.randn(2, 5, D), torch.randn(2, 3, D)
    torch.testing.assert_close(layer(x, memory)[0], x + cross(ln(x, layer.norm), memory), atol=1e-5, rtol=1e-5)
    mlp = MLP(cfg)
    assert not PLACEMENTS["hybrid"](mlp, make_ln, index=0, depth=4, qkv_norm="full").attention_form and mlp.inner_norm is None
    with pytest.raises(ValueError, match="CrossAttention has no slot 'inner_norm'"):
        cross.fill_slot(INNER_NORM, make_ln())


# √(ln 2N) by hand: ln 12 = 2.4849, ln 24 = 3.1781, ln 96 = 4.5643
@pytest.mark.parametrize("layers, gain", [(6, 1.5764), (12, 1.7827), (48, 2.1364)])
def test_subln_gain_is_sqrt_log_2n_in_resolved(layers, gain):
    model = GPT(ModelConfig(layers=layers, d_model=8, heads=2, seq_len=4, placement="subln"))
    assert model.settings()["placement"]["gain"] == pytest.approx(gain, abs=1e-4)
    assert model.blocks[0].attn.init_gain == pytest.approx(gain, abs=1e-4)


def _std_ok(w: torch.Tensor, expected: float) -> bool:
    # the sample std of n normals has relative standard error ≈ 1/√(2n); allow 5 of them
    return abs(w.std().item() / expected - 1) < 5 / math.sqrt(2 * w.numel())


def test_subln_gain_scales_value_output_and_mlp_weights():
    d, layers = 256, 12
    torch.manual_seed(0)
    model = GPT(ModelConfig(layers=layers, d_model=d, heads=4, seq_len=8, placement="subln"))
    gain = math.sqrt(math.log(2 * layers))
    attn, mlp = model.blocks[5].attn.sublayer, model.blocks[5].mlp.sublayer
    q, k, v = attn.qkv.weight.detach().split(d)
    xavier = lambda fan_in, fan_out: math.sqrt(2 / (fan_in + fan_out))  # noqa: E731
    cases = [(q, xavier(d, d)), (k, xavier(d, d)), (v, gain * xavier(d, d)), (attn.proj.weight, gain * xavier(d, d)),
             (mlp.fc_in.weight, gain * xavier(d, 4 * d)), (mlp.fc_out.weight, gain * xavier(4 * d, d))]
    for i, (w, std) in enumerate(cases):
        assert _std_ok(w.detach(), std), (i, w.std().item(), std)


# ---------------------------------------------------------------------------- ResiDual

def test_residual_dual_sublayer_updates_both_streams():
    torch.manual_seed(0)
    f = StandIn()
    layer = PLACEMENTS["residual_dual"](f, make_ln, index=0, depth=4)
    post, dual = torch.randn(2, 5, D) * 2, torch.randn(2, 5, D) * 3
    (new_post, new_dual), out = layer((post, dual))
    torch.testing.assert_close(out, f(post))
    torch.testing.assert_close(new_post, ln(post + f(post), layer.norm), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(new_dual, dual + f(post))


def test_residual_dual_model_is_the_two_streams_by_hand():
    """x_a = x_d = embedded input; per sublayer x_a ← LN(x_a + F(x_a)), x_d ← x_d + F(x_a);
    y = x_a + LN(x_d). The instruments' residual stream is x_a."""
    torch.manual_seed(0)
    model = GPT(ModelConfig(layers=3, d_model=D, heads=2, seq_len=8, placement="residual_dual")).eval()
    for m in model.modules():
        if type(m) is NORMS["layer"]:
            randomize(m)
    idx = torch.randint(0, 256, (2, 8))
    with torch.no_grad():
        post = dual = embedded = (model.tok_emb(idx) + model.pos_emb(torch.arange(8))) * math.sqrt(D)
        streams = []
        for block in model.blocks:
            for wrapper in (block.attn, block.mlp):
                out = wrapper.sublayer(post)
                post, dual = ln(post + out, wrapper.norm), dual + out
            streams.append(post)
        expected = post + ln(dual, model.final_norm.norm)
        torch.testing.assert_close(model.hidden(idx), expected, atol=1e-5, rtol=1e-5)
        with recording(model) as trace:
            model(idx)
    assert len(trace["block"]) == len(streams)
    for got, want in zip(trace["block"], streams):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(trace["embed"][0], embedded)  # not the pair block 0 receives
    torch.testing.assert_close(trace["final"][0], expected, atol=1e-5, rtol=1e-5)


# -------------------------------------------------------------------------- HybridNorm

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


# ------------------------------------------------------------------------------ gated

def test_gated_residual_is_the_gtrxl_gru_gate():
    torch.manual_seed(0)
    f = StandIn()
    layer = PLACEMENTS["gated"](f, make_ln, index=0, depth=4, gate_bias=1.5, attention_relu=False)
    assert torch.equal(layer.bias.detach(), torch.full((D,), 1.5))
    with torch.no_grad():
        layer.bias.add_(torch.randn(D) * 0.1)
    x = torch.randn(2, 5, D) * 2
    y = f(ln(x, layer.norm))
    W_r, W_z, W_g = layer.from_y.weight.split(D)
    U_r, U_z = layer.from_x.weight.split(D)
    U_g = layer.from_reset.weight
    r = torch.sigmoid(y @ W_r.t() + x @ U_r.t())
    z = torch.sigmoid(y @ W_z.t() + x @ U_z.t() - layer.bias)
    h = torch.tanh(y @ W_g.t() + (r * x) @ U_g.t())
    g = (1 - z) * x + z * h
    new, out = layer(x)
    torch.testing.assert_close(new, g, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out, g - x, atol=1e-5, rtol=1e-5)


def test_gated_residual_starts_near_the_identity():
    """b_g = 2: z ≈ σ(−2) ≈ 0.12 on average, so the block mostly passes x through."""
    torch.manual_seed(0)
    layer = build(PLACEMENTS, "placement", "gated", StandIn(), make_ln, index=0, depth=4)  # gate_bias: the yaml's
    assert layer.resolved() == {"gate_bias": 2.0, "attention_relu": False}
    x = torch.randn(8, 16, D)
    y = layer.sublayer(layer.norm(x))
    z = torch.sigmoid(layer.from_y(y).chunk(3, -1)[1] + layer.from_x(x).chunk(2, -1)[1] - 2.0)
    assert 0.05 < z.mean().item() < 0.3
    new, _ = layer(x)
    assert (new - x).norm() < 0.5 * x.norm()


def test_gated_attention_relu_is_the_authors_relu_on_the_attention_output_only():
    """attention_relu=true: y = ReLU(Attn(LN(x))) enters the gate (DI-engine's GTrXL); the MLP's
    y stays as it is."""
    torch.manual_seed(0)
    attn = randomize_biases(CausalSelfAttention(ModelConfig(d_model=D, heads=2)))
    layer = PLACEMENTS["gated"](attn, make_ln, index=0, depth=4, gate_bias=2.0, attention_relu=True)
    x = torch.randn(2, 5, D) * 2
    y = torch.relu(attn(ln(x, layer.norm)))
    assert (y == 0).any() and (y > 0).any()  # the ReLU bites
    W_r, W_z, W_g = layer.from_y.weight.split(D)
    U_r, U_z = layer.from_x.weight.split(D)
    r = torch.sigmoid(y @ W_r.t() + x @ U_r.t())
    z = torch.sigmoid(y @ W_z.t() + x @ U_z.t() - layer.bias)
    h = torch.tanh(y @ W_g.t() + (r * x) @ layer.from_reset.weight.t())
    torch.testing.assert_close(layer(x)[0], (1 - z) * x + z * h, atol=1e-5, rtol=1e-5)
    f = StandIn()  # not attention: no ReLU, even with the setting on
    mlp_like = PLACEMENTS["gated"](f, make_ln, index=0, depth=4, gate_bias=2.0, attention_relu=True)
    plain = PLACEMENTS["gated"](f, make_ln, index=0, depth=4, gate_bias=2.0, attention_relu=False)
    plain.load_state_dict(mlp_like.state_dict())
    torch.testing.assert_close(mlp_like(x)[0], plain(x)[0])


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



# -------------------------------------------------------------------------- ScaleNorm

def test_scalenorm_is_g_times_x_over_its_norm():
    norm = build(NORMS, "norm", "scale", D)
    assert norm.scale.item() == pytest.approx(math.sqrt(D))  # g starts at √d
    with torch.no_grad():
        norm.scale.fill_(2.5)
    x = torch.randn(3, 5, D) * 4
    torch.testing.assert_close(norm(x), 2.5 * x / torch.sqrt((x ** 2).sum(-1, keepdim=True)), atol=1e-6, rtol=1e-6)
    zero = torch.zeros(2, D)
    assert torch.equal(norm(zero), zero)  # max(‖x‖, ε): no division by zero
    tiny = torch.full((1, D), 1e-9)  # ‖x‖ = 4e-9 < ε: divided by ε instead
    torch.testing.assert_close(norm(tiny), 2.5 * tiny / 1e-5)
    # at init the output has unit RMS per token, as LayerNorm's
    fresh = build(NORMS, "norm", "scale", 64)
    y = fresh(torch.randn(4, 64) * 7)
    torch.testing.assert_close(y.pow(2).mean(-1), torch.ones(4), atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------- soft-caps

def test_attention_softcap_caps_the_logits_before_mask_and_softmax():
    torch.manual_seed(0)
    attn = randomize_biases(CausalSelfAttention(ModelConfig(d_model=D, heads=2, attn_softcap=10.0)))
    x = torch.randn(2, 7, D) * 4  # large logits, so the cap bites
    q, k, v = (heads(t, 2) for t in projections(attn, x))
    causal = torch.ones(7, 7, dtype=torch.bool).tril()
    raw = (q @ k.transpose(-1, -2) / math.sqrt(D // 2)).abs().masked_fill(~causal, 0).max()
    assert raw > 15  # beyond the cap
    out = attend(q, k, v, cap=10.0) @ attn.proj.weight.t() + attn.proj.bias
    torch.testing.assert_close(attn(x), out, atol=1e-5, rtol=1e-5)
    # the signal reads the capped logits: |logit| ≤ c, and the largest is c·tanh(max/c)
    signals = attention_signals([(q, k)], softcap=10.0)
    assert signals["attn_logit_max"].item() == pytest.approx(10.0 * math.tanh(raw.item() / 10.0), rel=1e-5)
    assert signals["attn_logit_max"].item() < 10
    assert attention_signals([(q, k)])["attn_logit_max"].item() == pytest.approx(raw.item(), rel=1e-5)
    # a cap far above every logit changes nothing: the written-out path equals the fused one
    attn.softcap = 1e6
    uncapped = CausalSelfAttention(ModelConfig(d_model=D, heads=2))
    uncapped.load_state_dict(attn.state_dict())
    torch.testing.assert_close(attn(x), uncapped(x), atol=1e-5, rtol=1e-5)


def test_logit_softcap_caps_the_output_logits_before_the_loss():
    torch.manual_seed(0)
    model = GPT(ModelConfig(layers=2, d_model=D, heads=2, seq_len=8, logit_softcap=3.0))
    idx, targets = torch.randint(0, 256, (2, 8)), torch.randint(0, 256, (2, 8))
    with torch.no_grad():
        model.tok_emb.weight.mul_(20)  # large logits, so the cap bites
        raw = model.hidden(idx) @ model.tok_emb.weight.t()
        logits, loss = model(idx, targets)
    assert raw.abs().max() > 6
    torch.testing.assert_close(logits, 3.0 * torch.tanh(raw / 3.0), atol=1e-5, rtol=1e-5)
    assert logits.abs().max() <= 3.0
    assert loss.item() == pytest.approx(F.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1)).item(), rel=1e-5)


def test_softcap_keys_default_off_and_are_validated():
    cfg = compose_config([])
    assert cfg.attn_softcap is None and cfg.logit_softcap is None
    check_job(compose_config(["attn_softcap=50", "logit_softcap=0"]), set())  # a cap, and 0 = off
    for key in ("attn_softcap", "logit_softcap"):
        for bad in ("-1", "0.0-1", "true"):
            with pytest.raises(ConfigError, match=rf"^{key}="):
                check_job(compose_config([f"{key}={bad}"]), {key})


def test_instruments_read_hybrid_queries_and_the_capped_attention_logits():
    """Under HybridNorm the dot product sees the q and k norms' outputs; under attn_softcap
    attn_logit_max is the largest |c·tanh(q·k/(√d_h·c))|, written out here for block 0."""
    torch.manual_seed(0)
    cap = 0.5  # below the logits at init, so the cap shows
    model = GPT(ModelConfig(layers=2, d_model=D, heads=2, seq_len=8, placement="hybrid", attn_softcap=cap))
    idx = torch.randint(0, 256, (2, 8))
    with recording(model) as trace:
        model(idx)
    attn = model.blocks[0].attn.sublayer
    with torch.no_grad():
        x = (model.tok_emb(idx) + model.pos_emb(torch.arange(8))) * math.sqrt(D)
        q, k, _ = (heads(ln(t, norm), 2) for t, norm in zip(projections(attn, x), attn.qkv_norm))
    torch.testing.assert_close(trace["queries"][0], q[:1], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(trace["keys"][0], k[:1], atol=1e-5, rtol=1e-5)
    causal = torch.ones(8, 8, dtype=torch.bool).tril()
    raw = (q[:1] @ k[:1].transpose(-1, -2) / math.sqrt(D // 2)).abs().masked_fill(~causal, 0).max().item()
    assert raw > cap
    values = Instruments(model).activations(trace)
    assert values["attn_logit_max"][0].item() == pytest.approx(cap * math.tanh(raw / cap), rel=1e-5)
