"""The peri placement (normexp/model/placements/sandwich.py, configs/placement/peri.yaml): its
formulas against hand computations. SHAPE and SETTINGS, worked out by hand, are read by the
tests every placement passes (tests/model/test_placements.py, test_wiring, test_presets) through
tests/conftest.py's `placement_expectations`."""

import torch

from model_helpers import sandwich_block_output
from normexp.model import PLACEMENTS


# (norms per block, whether the model adds a final norm); Norm_in and Norm_out around each sublayer
SHAPE = (4, True)
# its resolved settings at 2 blocks (summary.json's placement_settings): no settings of its own
SETTINGS = {}


def test_peri_is_the_sandwich_block_under_its_own_name():
    """Peri-LN's x ← x + LN_out(F(LN_in(x))) is Sandwich-LN's block: one class, two names."""
    x, y, _, want = sandwich_block_output("peri")
    torch.testing.assert_close(y, x + want, atol=1e-5, rtol=1e-5)
    assert PLACEMENTS["peri"] is PLACEMENTS["sandwich"]
