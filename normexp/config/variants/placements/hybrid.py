"""placement=hybrid: its settings, their rules and the numbers worked out from them
(the placement itself: model/placements/hybrid.py)."""

from __future__ import annotations

from ...checks import require
from ...registry import register
from ..base import PLACEMENT_SETTINGS, PlacementSettings


@register(PLACEMENT_SETTINGS, "hybrid")
class HybridNormSettings(PlacementSettings):
    """HybridNorm's QKV normalization: over the full width ("full") or each head's features
    ("per_head")."""

    def __init__(self, *, qkv_norm: str):
        require(qkv_norm in ("full", "per_head"), "placement.qkv_norm", qkv_norm,
                "choose full (over the width d) or per_head (each head's d_head features, as the authors' code)")
        self.qkv_norm = qkv_norm

    def resolved(self, depth: int) -> dict:
        return {"qkv_norm": self.qkv_norm}
