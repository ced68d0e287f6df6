"""The sandwich placement (normexp/model/placements/sandwich.py, configs/placement/sandwich.yaml): its
formulas against hand computations. SHAPE and SETTINGS, worked out by hand, are read by the
tests every placement passes (tests/model/test_placements.py, test_wiring, test_presets) through
tests/conftest.py's `placement_expectations`."""

import torch

from model_helpers import sandwich_block_output


# (norms per block, whether the model adds a final norm); Norm_in and Norm_out around each sublayer
SHAPE = (4, True)
# its resolved settings at 2 blocks (summary.json's placement_settings): no settings of its own
SETTINGS = {}


def test_sandwich_sublayer_normalizes_both_the_input_and_the_output_of_f():
    """x ← x + LN_out(F(LN_in(x))); the contribution is LN_out(F(LN_in(x)))."""
    x, y, out, want = sandwich_block_output("sandwich")
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(y, x + want, atol=1e-5, rtol=1e-5)
