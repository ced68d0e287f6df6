"""The layerscale placement (normexp/model/placements/layerscale.py, configs/placement/layerscale.yaml): its
formulas against hand computations. SHAPE and SETTINGS, worked out by hand, are read by the
tests every placement passes (tests/model/test_placements.py, test_wiring, test_presets) through
tests/conftest.py's `placement_expectations`."""

import pytest
import torch
import torch.nn.functional as F

from model_helpers import D, StandIn, by_hand_norm, compose_model
from normexp.config.registry import build
from normexp.model import NORMS, PLACEMENTS


# (norms per block, whether the model adds a final norm)
SHAPE = (2, True)
# its resolved settings at 2 blocks (summary.json's placement_settings): LayerScale: CaiT's ε = 0.1 up to 18 blocks
SETTINGS = {"init_scale": 0.1}


def test_layerscale_sublayer_is_x_plus_lambda_f_of_the_norm():
    """x ← x + λ·F(LN(x)), λ = 0.1 per channel (CaiT's rule at depth 6, the yaml's auto)."""
    f = StandIn()
    layer = build(PLACEMENTS, "placement", "layerscale", f, lambda: NORMS["layer"](D, eps=1e-5), index=0, depth=6)
    x = torch.randn(2, 5, D, generator=torch.Generator().manual_seed(0)) * 3
    y, out = layer(x)
    torch.testing.assert_close(out, 0.1 * f(by_hand_norm(x)), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(y, x + 0.1 * f(by_hand_norm(x)), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("depth, scale", [(6, 0.1), (18, 0.1), (24, 1e-5), (36, 1e-6), (1000, 1e-6)])
def test_layerscale_initial_scale_follows_cait_for_the_depth(depth, scale):
    layer = build(PLACEMENTS, "placement", "layerscale", StandIn(), lambda: build(NORMS, "norm", "layer", D),
                  index=0, depth=depth)  # init_scale: the yaml's "auto"
    assert torch.equal(layer.scale.detach(), torch.full((D,), scale))  # one λ per channel
    custom = PLACEMENTS["layerscale"](StandIn(), lambda: build(NORMS, "norm", "layer", D), index=0, depth=depth, init_scale=1e-3)
    assert torch.equal(custom.scale.detach(), torch.full((D,), 1e-3))
    assert layer.needs_final_norm  # the stream is not normalized: the model adds a final norm


@pytest.mark.parametrize("setting, scale", [([], 0.1), (["placement.init_scale=0.003"], 0.003)])
def test_layerscale_init_scale_from_the_command_line_scales_every_sublayer(setting, scale):
    """x ← x + λ·F(LN(x)), λ = init_scale per channel (auto: 0.1 for 2 blocks, CaiT)."""
    model = compose_model("placement=layerscale", *setting)
    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(6)) * 2
    with torch.no_grad():
        for block in model.blocks:
            for wrapper in (block.attn, block.mlp):
                y, out = wrapper(x)
                want = scale * wrapper.sublayer(F.layer_norm(x, (16,), eps=1e-5))
                torch.testing.assert_close(out, want, atol=1e-7, rtol=1e-5)
                torch.testing.assert_close(y, x + want, atol=1e-6, rtol=1e-5)
