"""placement=rezero: its settings, their rules and the numbers worked out from them
(the placement itself: model/placements/rezero.py)."""

from __future__ import annotations

from ...checks import is_float32, require
from ...registry import register
from ..base import PLACEMENT_SETTINGS, PlacementSettings


@register(PLACEMENT_SETTINGS, "rezero")
class ReZeroSettings(PlacementSettings):
    """ReZero's starting α, any finite number (0 in the paper)."""

    # no norm of its own: the norm type reaches the model only through QK-norm (qk_norm=true)
    reads = frozenset({"qk_norm", "scale_embeddings"})

    def __init__(self, *, init_alpha: float):
        require(is_float32(init_alpha), "placement.init_alpha", init_alpha, "must be a finite number")
        self.init_alpha = float(init_alpha)

    def resolved(self, depth: int) -> dict:
        return {"init_alpha": self.init_alpha}
