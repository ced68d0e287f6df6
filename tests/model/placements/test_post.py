"""The post placement (normexp/model/placements/post.py, configs/placement/post.yaml): its
formulas against hand computations. SHAPE and SETTINGS, worked out by hand, are read by the
tests every placement passes (tests/model/test_placements.py, test_wiring, test_presets) through
tests/conftest.py's `placement_expectations`."""

import torch

from model_helpers import D, StandIn, by_hand_norm
from normexp.model import NORMS, PLACEMENTS


# (norms per block, whether the model adds a final norm)
SHAPE = (2, False)
# its resolved settings at 2 blocks (summary.json's placement_settings): no settings of its own
SETTINGS = {}


def test_post_sublayer_is_the_norm_of_x_plus_f():
    """x ← LN(x + F(x)); the contribution is F(x)."""
    f = StandIn()
    layer = PLACEMENTS["post"](f, lambda: NORMS["layer"](D, eps=1e-5), index=0, depth=6)
    x = torch.randn(2, 5, D, generator=torch.Generator().manual_seed(0)) * 3
    y, out = layer(x)
    torch.testing.assert_close(out, f(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(y, by_hand_norm(x + f(x)), atol=1e-5, rtol=1e-5)
