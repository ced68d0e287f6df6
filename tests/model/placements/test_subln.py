"""The subln placement (normexp/model/placements/subln.py, configs/placement/subln.yaml): its
formulas against hand computations. SHAPE and SETTINGS, worked out by hand, are read by the
tests every placement passes (tests/model/test_placements.py, test_wiring, test_presets) through
tests/conftest.py's `placement_expectations`."""

import math

import pytest
import torch
import torch.nn.functional as F

from model_helpers import D, randomize, ln, make_ln, heads, attend, projections, randomize_biases
from normexp.model import GPT, PLACEMENTS, ModelConfig
from normexp.model.layers import MLP, CausalSelfAttention


# (norms per block, whether the model adds a final norm); 2 outer + 2 inner (before W_O and W₂)
SHAPE = (4, True)
# its resolved settings at 2 blocks (summary.json's placement_settings): Sub-LN: γ = √(ln 2N) = √(ln 4)
SETTINGS = {"gain": math.sqrt(math.log(4))}


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
