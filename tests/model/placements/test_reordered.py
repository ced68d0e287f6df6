"""The reordered placement (normexp/model/placements/reordered.py, configs/placement/reordered.yaml): its
formulas against hand computations. SHAPE and SETTINGS, worked out by hand, are read by the
tests every placement passes (tests/model/test_placements.py, test_wiring, test_presets) through
tests/conftest.py's `placement_expectations`."""

import torch

from model_helpers import D, StandIn, by_hand_norm
from normexp.model import GPT, NORMS, PLACEMENTS, ModelConfig


# (norms per block, whether the model adds a final norm): one on each sublayer's output, and
# a final one (the stream is never normalized)
SHAPE = (2, True)
# its resolved settings at 2 blocks (summary.json's placement_settings): no settings of its own
SETTINGS = {}


def test_reordered_sublayer_is_x_plus_norm_of_f_of_x():
    """x ← x + LN(F(x)): F sees the raw stream, its output is normalized (unit RMS per token)."""
    f = StandIn()
    layer = PLACEMENTS["reordered"](f, lambda: NORMS["layer"](D, eps=1e-5), index=2, depth=4)
    x = torch.randn(2, 5, D, generator=torch.Generator().manual_seed(0)) * 3 + 1
    y, out = layer(x)
    torch.testing.assert_close(out, by_hand_norm(f(x)), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(y, x + by_hand_norm(f(x)), atol=1e-6, rtol=1e-5)
    # no input norm: scaling x changes what F sees (a Pre-LN sublayer would not notice a scale)
    _, out_scaled = layer(4 * x)
    assert not torch.allclose(out_scaled, out, atol=1e-3)


def test_reordered_model_by_hand():
    torch.manual_seed(0)
    model = GPT(ModelConfig(layers=2, d_model=D, heads=2, seq_len=8, placement="reordered")).eval()
    idx = torch.randint(0, 256, (2, 8))
    with torch.no_grad():
        x = model.embed(idx)
        for block in model.blocks:
            for wrapper in (block.attn, block.mlp):
                x = x + by_hand_norm(wrapper.sublayer(x))
        torch.testing.assert_close(model.hidden(idx), by_hand_norm(x), atol=1e-5, rtol=1e-5)
