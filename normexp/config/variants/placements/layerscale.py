"""placement=layerscale: its settings, their rules and the numbers worked out from them
(the placement itself: model/placements/layerscale.py)."""

from __future__ import annotations

from ...checks import is_positive_float32, require
from ...registry import register
from ..base import PLACEMENT_SETTINGS, PlacementSettings


@register(PLACEMENT_SETTINGS, "layerscale")
class LayerScaleSettings(PlacementSettings):
    """LayerScale's starting scale ε: "auto" (CaiT's rule for the depth: 0.1 up to 18 blocks,
    1e-5 up to 24, 1e-6 deeper) or a number in (0, 1]."""

    def __init__(self, *, init_scale):
        # above 1 the branch starts larger than Pre-LN's, the opposite of what LayerScale is for
        require(init_scale == "auto" or (is_positive_float32(init_scale) and init_scale <= 1), "placement.init_scale",
                init_scale, 'must be "auto" or a number in (0, 1] (CaiT uses 0.1 to 1e-6)')
        self.init_scale = init_scale

    def resolved(self, depth: int) -> dict:
        auto = 0.1 if depth <= 18 else 1e-5 if depth <= 24 else 1e-6
        return {"init_scale": auto if self.init_scale == "auto" else float(self.init_scale)}
