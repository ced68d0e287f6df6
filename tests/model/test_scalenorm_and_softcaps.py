"""ScaleNorm and the soft-capped attention and output logits (issue 21) against hand
computations, each formula written out here with the module's own weights. (The placements of
that issue, Sub-LN, ResiDual, HybridNorm and the gate, have their own files in placements/.)"""

import math

import pytest
import torch
import torch.nn.functional as F

from model_helpers import D, attend, heads, ln, projections, randomize_biases

from normexp.config.checks import ConfigError
from normexp.config.compose import compose_config
from normexp.config.registry import build
from normexp.launch.preflight import check_job
from normexp.model import GPT, NORMS, ModelConfig
from normexp.model.layers import CausalSelfAttention
from normexp.train.instruments import Instruments, attention_signals, recording


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
