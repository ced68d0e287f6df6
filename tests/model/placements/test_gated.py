"""The gated placement (normexp/model/placements/gated.py, configs/placement/gated.yaml): its
formulas against hand computations. SHAPE and SETTINGS, worked out by hand, are read by the
tests every placement passes (tests/model/test_placements.py, test_wiring, test_presets) through
tests/conftest.py's `placement_expectations`."""

import torch

from model_helpers import D, StandIn, ln, make_ln, randomize_biases
from normexp.config.registry import build
from normexp.model import PLACEMENTS, ModelConfig
from normexp.model.layers import CausalSelfAttention


# (norms per block, whether the model adds a final norm)
SHAPE = (2, True)
# its resolved settings at 2 blocks (summary.json's placement_settings): gated residual: GTrXL's gate bias 2,
# no ReLU on the attention output (the authors' code has one: attention_relu=true)
SETTINGS = {"gate_bias": 2.0, "attention_relu": False}


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
