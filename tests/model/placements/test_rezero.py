"""The rezero placement (normexp/model/placements/rezero.py, configs/placement/rezero.yaml): its
formulas against hand computations. SHAPE and SETTINGS, worked out by hand, are read by the
tests every placement passes (tests/model/test_placements.py, test_wiring, test_presets) through
tests/conftest.py's `placement_expectations`."""

import math

import torch

from model_helpers import D, StandIn
from normexp.config.registry import build
from normexp.model import GPT, NORMS, PLACEMENTS, ModelConfig


# (norms per block, whether the model adds a final norm); no norm anywhere
SHAPE = (0, False)
# its resolved settings at 2 blocks (summary.json's placement_settings): ReZero: α starts at 0
SETTINGS = {"init_alpha": 0.0}


def test_rezero_block_is_x_plus_alpha_f_and_the_model_starts_as_the_identity():
    torch.manual_seed(0)
    f = StandIn()
    layer = PLACEMENTS["rezero"](f, lambda: build(NORMS, "norm", "layer", D), index=0, depth=4, init_alpha=0.3)
    x = torch.randn(2, 5, D)
    y, out = layer(x)
    torch.testing.assert_close(y, x + 0.3 * f(x))
    torch.testing.assert_close(out, 0.3 * f(x))
    model = GPT(ModelConfig(layers=3, d_model=D, heads=2, seq_len=8, placement="rezero")).eval()
    idx = torch.randint(0, 256, (2, 8))
    embedded = (model.tok_emb(idx) + model.pos_emb(torch.arange(8))) * math.sqrt(D)
    assert torch.equal(model.hidden(idx), embedded)  # α = 0 everywhere and no final norm
    assert not any(isinstance(m, tuple(NORMS.values())) and type(m) is not NORMS["none"] for m in model.modules())
