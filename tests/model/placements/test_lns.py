"""The lns placement (normexp/model/placements/lns.py, configs/placement/lns.yaml): its
formulas against hand computations. SHAPE and SETTINGS, worked out by hand, are read by the
tests every placement passes (tests/model/test_placements.py, test_wiring, test_presets) through
tests/conftest.py's `placement_expectations`."""

import math

import pytest
import torch

from model_helpers import D, StandIn, by_hand_norm
from normexp.model import GPT, NORMS, PLACEMENTS, ModelConfig


# (norms per block, whether the model adds a final norm): Pre-LN's
SHAPE = (2, True)
# its resolved settings at 2 blocks (summary.json's placement_settings): no settings of its own
SETTINGS = {}


@pytest.mark.parametrize("index, scale", [(0, 1.0), (1, 1 / math.sqrt(2)), (3, 0.5), (8, 1 / 3)])
def test_lns_sublayer_is_x_plus_f_of_norm_over_root_of_the_1_based_index(index, scale):
    """x ← x + F(LN(x)/√ℓ), ℓ = index + 1: block 3 (ℓ = 4) scales by ½, block 8 by ⅓."""
    f = StandIn()
    layer = PLACEMENTS["lns"](f, lambda: NORMS["layer"](D, eps=1e-5), index=index, depth=12)
    x = torch.randn(2, 5, D, generator=torch.Generator().manual_seed(index)) * 3 + 1
    y, out = layer(x)
    want = f(by_hand_norm(x) * scale)
    torch.testing.assert_close(out, want, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(y, x + want, atol=1e-6, rtol=1e-5)


def test_lns_model_scales_each_block_by_its_own_depth():
    """The whole stack by hand: block l's two sublayers both use 1/√(l+1); then the final LN."""
    torch.manual_seed(0)
    model = GPT(ModelConfig(layers=3, d_model=D, heads=2, seq_len=8, placement="lns")).eval()
    idx = torch.randint(0, 256, (2, 8))
    with torch.no_grad():
        x = model.embed(idx)
        for l, block in enumerate(model.blocks):
            for wrapper in (block.attn, block.mlp):
                x = x + wrapper.sublayer(by_hand_norm(x) / math.sqrt(l + 1))
        torch.testing.assert_close(model.hidden(idx), by_hand_norm(x), atol=1e-5, rtol=1e-5)
