"""The other stabilizers against their formulas, written out here: QK-norm attention, the
z-loss, and the std of each init scheme. (ReZero and Admin are placements: placements/.)"""

import math

import pytest
import torch
import torch.nn.functional as F

from model_helpers import D

from normexp.config.compose import compose_config
from normexp.model import GPT, NORMS, ModelConfig
from normexp.config.registry import build
from normexp.model.layers import CausalSelfAttention


def test_qk_norm_attention_matches_a_hand_written_attention():
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=D, heads=2)
    attn = CausalSelfAttention(cfg, make_qk_norm=lambda: build(NORMS, "norm", "layer", D // 2))
    with torch.no_grad():
        for norm in (attn.q_norm, attn.k_norm):
            norm.weight.copy_(torch.rand(D // 2) + 0.5)
            norm.bias.copy_(torch.randn(D // 2) * 0.1)
    x = torch.randn(3, 7, D)
    q, k, v = (x @ attn.qkv.weight.t() + attn.qkv.bias).split(D, dim=-1)
    heads = lambda t: t.view(3, 7, 2, D // 2).transpose(1, 2)  # noqa: E731
    q, k, v = heads(q), heads(k), heads(v)
    ln = lambda t, n: F.layer_norm(t, (D // 2,), n.weight, n.bias, 1e-5)  # noqa: E731
    q, k = ln(q, attn.q_norm), ln(k, attn.k_norm)
    scores = q @ k.transpose(-1, -2) / math.sqrt(D // 2)
    scores = scores.masked_fill(torch.triu(torch.ones(7, 7, dtype=torch.bool), 1), float("-inf"))
    y = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(3, 7, D)
    torch.testing.assert_close(attn(x), y @ attn.proj.weight.t() + attn.proj.bias, atol=1e-5, rtol=1e-5)
    # and qk_norm=true in the config puts a norm of the run's type on q and k of every block
    model = GPT(ModelConfig.from_composed(compose_config(["qk_norm=true", "norm=rms", "layers=2", "d_model=32", "heads=4"]), 256))
    assert all(type(b.attn.sublayer.q_norm) is NORMS["rms"] and b.attn.sublayer.q_norm.weight.shape == (8,)
               for b in model.blocks)


def test_z_loss_adds_c_times_mean_squared_log_partition():
    torch.manual_seed(0)
    model = GPT(ModelConfig(layers=2, d_model=D, heads=2, seq_len=8))
    idx, targets = torch.randint(0, 256, (2, 8)), torch.randint(0, 256, (2, 8))
    targets[1, 4:] = -100  # ignored positions add nothing, to either term
    logits, ce = model(idx, targets)
    _, total = model(idx, targets, z_loss=1e-2)
    kept = logits.reshape(-1, 256)[targets.reshape(-1) != -100]
    log_z = torch.log(torch.exp(kept.double()).sum(-1))
    by_hand = F.cross_entropy(kept, targets.reshape(-1)[targets.reshape(-1) != -100]).double() + 1e-2 * (log_z ** 2).mean()
    assert total.item() == pytest.approx(by_hand.item(), rel=1e-5)
    assert total.item() > ce.item()


def _std_ok(w: torch.Tensor, expected: float) -> bool:
    # the sample std of n normals has relative standard error ≈ 1/√(2n); allow 5 of them
    return abs(w.std().item() / expected - 1) < 5 / math.sqrt(2 * w.numel())


@pytest.mark.parametrize("placement", ["pre", "deepnorm"])
def test_init_schemes_draw_the_stds_of_their_papers(placement):
    d, layers = 256, 12
    beta = (8 * layers) ** -0.25 if placement == "deepnorm" else 1.0  # DeepNorm's β applies on top
    for init in ("gpt2", "small"):
        torch.manual_seed(0)
        model = GPT(ModelConfig.from_composed(compose_config([f"init={init}", f"placement={placement}", f"layers={layers}",
                                                  f"d_model={d}", "heads=4", "seq_len=8"]), 256))
        block = model.blocks[4]
        attn, mlp = block.attn.sublayer, block.mlp.sublayer
        q, k, v = attn.qkv.weight.detach().split(d)
        base = 0.02 if init == "gpt2" else math.sqrt(2 / (5 * d))
        residual = 0.02 / math.sqrt(2 * layers) if init == "gpt2" else base
        cases = [(q, base), (k, base), (v, beta * base), (attn.proj.weight, beta * residual),
                 (mlp.fc_in.weight, beta * base), (mlp.fc_out.weight, beta * residual)]
        for i, (w, std) in enumerate(cases):
            assert _std_ok(w.detach(), std), (init, placement, i, w.std().item(), std)
        embedding_std = 0.02 if init == "gpt2" else d ** -0.5
        assert _std_ok(model.tok_emb.weight.detach(), embedding_std), init


