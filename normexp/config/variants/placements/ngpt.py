"""placement=ngpt: its settings, their rules and the numbers worked out from them
(the placement itself: model/placements/ngpt.py)."""

from __future__ import annotations

from ...checks import is_positive_float32, require
from ...registry import register
from ..base import PLACEMENT_SETTINGS, PlacementSettings


@register(PLACEMENT_SETTINGS, "ngpt")
class NormalizedTransformerSettings(PlacementSettings):
    """nGPT's starting α (the step towards F's output), in (0, 1]."""

    # its unit maps replace every norm and QK-norm (the slots' run-wide norms), and the input is
    # normalized as it enters, so its √d scale (scale_embeddings) cancels
    reads = frozenset()
    unpackable = "nGPT renormalizes every matrix after each step and scales the logits"

    def __init__(self, *, alpha_init: float):
        require(is_positive_float32(alpha_init) and alpha_init <= 1, "placement.alpha_init", alpha_init,
                "must be a number in (0, 1] (nGPT starts α at 0.05)")
        self.alpha_init = float(alpha_init)

    def resolved(self, depth: int) -> dict:
        return {"alpha_init": self.alpha_init}
