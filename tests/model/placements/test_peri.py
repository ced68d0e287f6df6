"""The peri placement (normexp/model/placements/sandwich.py, configs/placement/peri.yaml): its
formulas against hand computations. SHAPE and SETTINGS, worked out by hand, are read by the
tests every placement passes (tests/model/test_placements.py, test_wiring, test_presets) through
tests/conftest.py's `placement_expectations`."""

import torch

from model_helpers import D, StandIn, by_hand_norm
from normexp.model import NORMS, PLACEMENTS


# (norms per block, whether the model adds a final norm); Norm_in and Norm_out around each sublayer
SHAPE = (4, True)
# its resolved settings at 2 blocks (summary.json's placement_settings): no settings of its own
SETTINGS = {}


def test_peri_is_the_sandwich_block_under_its_own_name():
    """Peri-LN's x ← x + LN_out(F(LN_in(x))) is Sandwich-LN's block: one class, two names."""
    f = StandIn()
    layer = PLACEMENTS["peri"](f, lambda: NORMS["layer"](D, eps=1e-5), index=0, depth=6)
    x = torch.randn(2, 5, D, generator=torch.Generator().manual_seed(0)) * 3
    y, out = layer(x)
    want = by_hand_norm(f(by_hand_norm(x)))
    torch.testing.assert_close(y, x + want, atol=1e-5, rtol=1e-5)
    assert PLACEMENTS["peri"] is PLACEMENTS["sandwich"]
