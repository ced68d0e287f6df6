"""The deepnorm placement (normexp/model/placements/deepnorm.py, configs/placement/deepnorm.yaml): its
formulas against hand computations. SHAPE and SETTINGS, worked out by hand, are read by the
tests every placement passes (tests/model/test_placements.py, test_wiring, test_presets) through
tests/conftest.py's `placement_expectations`."""

import math

import pytest
import torch
import torch.nn.functional as F

from model_helpers import D, StandIn, by_hand_norm, compose_model, init_std_ratio
from normexp.model import GPT, NORMS, PLACEMENTS, ModelConfig
from normexp.config.variants.placements.deepnorm import deepnorm_constants
from normexp.model.placements.deepnorm import DeepNorm


# (norms per block, whether the model adds a final norm)
SHAPE = (2, False)
# its resolved settings at 2 blocks (summary.json's placement_settings): DeepNorm at N = 2 blocks: α = (2N)^¼ = √2, β = (8N)^-¼ = 1/2
SETTINGS = {"alpha": math.sqrt(2), "beta": 0.5}


def test_deepnorm_sublayer_is_the_norm_of_alpha_x_plus_f():
    """x ← LN(α·x + F(x)), α = 2.5 given; the contribution is F(x)."""
    f = StandIn()
    layer = PLACEMENTS["deepnorm"](f, lambda: NORMS["layer"](D, eps=1e-5), index=0, depth=6, alpha=2.5, beta="auto")
    x = torch.randn(2, 5, D, generator=torch.Generator().manual_seed(0)) * 3
    y, out = layer(x)
    torch.testing.assert_close(out, f(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(y, by_hand_norm(2.5 * x + f(x)), atol=1e-5, rtol=1e-5)


# The DeepNet paper's formulas evaluated by hand for N = 6, 12, 24, 48.
@pytest.mark.parametrize("n, alpha, beta", [(6, 1.861, 0.380), (12, 2.213, 0.319), (24, 2.632, 0.269), (48, 3.130, 0.226)])
def test_deepnorm_constants_table(n, alpha, beta):
    a, b = deepnorm_constants(n)
    assert a == pytest.approx(alpha, abs=6e-4) and b == pytest.approx(beta, abs=6e-4)
    model = GPT(ModelConfig(layers=n, d_model=8, heads=2, seq_len=4, placement="deepnorm"))
    assert model.settings()["placement"]["alpha"] == pytest.approx(alpha, abs=6e-4)
    assert model.blocks[0].attn.alpha == pytest.approx(alpha, abs=6e-4)


def test_deepnorm_alpha_multiplies_the_residual_not_the_sublayer():
    f = StandIn()
    layer = DeepNorm(f, lambda: NORMS["none"](D), index=0, depth=6, alpha=3.0, beta="auto")
    x = torch.randn(2, 3, D)
    torch.testing.assert_close(layer(x)[0], 3.0 * x + f(x))


def test_deepnorm_init_std_is_beta_scaled_xavier():
    d, layers = 256, 12
    model = GPT(ModelConfig(layers=layers, d_model=d, heads=4, seq_len=8, placement="deepnorm"))
    beta = (8 * layers) ** -0.25
    block = model.blocks[5]
    attn, mlp = block.attn.sublayer, block.mlp.sublayer
    q, k, v = attn.qkv.weight.detach().split(d)
    cases = [(q, 1.0, d, d), (k, 1.0, d, d), (v, beta, d, d), (attn.proj.weight, beta, d, d),
             (mlp.fc_in.weight, beta, d, 4 * d), (mlp.fc_out.weight, beta, 4 * d, d)]
    for w, gain, fan_in, fan_out in cases:
        expected = gain * math.sqrt(2.0 / (fan_in + fan_out))
        n = w.numel()
        # the sample std of n normals has relative standard error ≈ 1/sqrt(2n); allow 5 of them
        assert abs(w.std().item() / expected - 1) < 5 / math.sqrt(2 * n), (gain, fan_in, fan_out)


def test_custom_deepnorm_constants_are_used():
    model = GPT(ModelConfig(layers=6, d_model=D, heads=2, seq_len=4,
                            placement={"name": "deepnorm", "alpha": 1.5, "beta": 0.5}))
    assert model.blocks[3].mlp.alpha == 1.5 and model.settings()["placement"]["beta"] == 0.5


def check_deepnorm(model: GPT, alpha: float, beta: float, d: int) -> None:
    # α multiplies the residual in every sublayer's forward: y = LN(α·x + F(x)), γ=1, β=0 at init
    x = torch.randn(2, 8, d, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        for block in model.blocks:
            for wrapper in (block.attn, block.mlp):
                y, out = wrapper(x)
                f = wrapper.sublayer(x)
                torch.testing.assert_close(out, f)
                torch.testing.assert_close(y, F.layer_norm(alpha * x + f, (d,), eps=1e-5), atol=1e-5, rtol=1e-5)
    # β is the Xavier gain of v, proj, fc_in, fc_out; q and k keep gain 1
    qk, rest, se = init_std_ratio(model, d)
    assert abs(qk - 1) < 0.05, qk
    assert abs(rest / beta - 1) < 5 * se, (rest, beta)


def test_deepnorm_alpha_and_beta_from_the_command_line_reach_forward_and_init():
    d = 64
    model = compose_model("placement=deepnorm", "placement.alpha=2", "placement.beta=0.5", "layers=3", f"d_model={d}",
                  "heads=4")
    check_deepnorm(model, alpha=2.0, beta=0.5, d=d)
    assert model.settings()["placement"] == {"alpha": 2.0, "beta": 0.5}


def test_deepnorm_auto_constants_reach_forward_and_init():
    """N = 3 blocks: α = 6^(1/4) ≈ 1.565, β = 24^(-1/4) ≈ 0.452."""
    d = 64
    model = compose_model("placement=deepnorm", "layers=3", f"d_model={d}", "heads=4")
    check_deepnorm(model, alpha=6 ** 0.25, beta=24 ** -0.25, d=d)
