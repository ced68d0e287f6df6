"""The admin placement (normexp/model/placements/admin.py, configs/placement/admin.yaml): its
formulas against hand computations. SHAPE and SETTINGS, worked out by hand, are read by the
tests every placement passes (tests/model/test_placements.py, test_wiring, test_presets) through
tests/conftest.py's `placement_expectations`."""

import math
import copy

import torch
import torch.nn.functional as F

from model_helpers import D, StandIn
from normexp.config.registry import build
from normexp.model import GPT, NORMS, PLACEMENTS, ModelConfig


# (norms per block, whether the model adds a final norm)
SHAPE = (2, False)
# its resolved settings at 2 blocks (summary.json's placement_settings): no settings of its own
SETTINGS = {}


def test_admin_omega_equals_a_hand_computation_of_the_profiling_pass():
    torch.manual_seed(0)
    model = GPT(ModelConfig(layers=3, d_model=D, heads=2, seq_len=8, placement="admin"))
    idx = torch.randint(0, 256, (4, 8))
    # by hand: ω = 1 everywhere, the variance each sublayer's output has, in stream order
    reference = copy.deepcopy(model)
    variances, hooks = [], []
    for block in reference.blocks:
        for wrapper in (block.attn, block.mlp):
            with torch.no_grad():
                wrapper.omega.fill_(1.0)
            hooks.append(wrapper.sublayer.register_forward_hook(
                lambda m, i, out: variances.append(out.detach().var(unbiased=False).item())))
    with torch.no_grad():
        reference.hidden(idx)
        embedded = (model.tok_emb(idx) + model.pos_emb(torch.arange(8))) * math.sqrt(D)
    expected = [math.sqrt(embedded.var(unbiased=False).item() + sum(variances[:i])) for i in range(6)]
    assert model.calibrate(idx)
    got = [w.omega for b in model.blocks for w in (b.attn, b.mlp)]
    for omega, want in zip(got, expected):
        torch.testing.assert_close(omega.detach(), torch.full((D,), want), rtol=1e-5, atol=0)
    assert expected[0] > 0.9 and expected[-1] > expected[0]  # unit-scale input, then growing
    # and the block computes Norm(ω·x + F(x))
    f = StandIn()
    layer = PLACEMENTS["admin"](f, lambda: build(NORMS, "norm", "layer", D), index=0, depth=3)
    with torch.no_grad():
        layer.omega.fill_(2.5)
    x = torch.randn(2, 5, D)
    torch.testing.assert_close(layer(x)[0], F.layer_norm(2.5 * x + f(x), (D,)), atol=1e-5, rtol=1e-5)
