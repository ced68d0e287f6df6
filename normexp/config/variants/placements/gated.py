"""placement=gated: its settings, their rules and the numbers worked out from them
(the placement itself: model/placements/gated.py)."""

from __future__ import annotations

from ...checks import is_float32, require
from ...registry import register
from ..base import PLACEMENT_SETTINGS, PlacementSettings


@register(PLACEMENT_SETTINGS, "gated")
class GatedResidualSettings(PlacementSettings):
    """The gated residual's starting gate bias b_g and whether the attention's output passes a
    ReLU before the gate (GTrXL's form)."""

    def __init__(self, *, gate_bias: float, attention_relu: bool):
        require(is_float32(gate_bias), "placement.gate_bias", gate_bias, "must be a finite number (GTrXL uses 2)")
        require(isinstance(attention_relu, bool), "placement.attention_relu", attention_relu,
                "must be true (the authors' ReLU on the attention output) or false")
        self.gate_bias, self.attention_relu = float(gate_bias), attention_relu

    def resolved(self, depth: int) -> dict:
        return {"gate_bias": self.gate_bias, "attention_relu": self.attention_relu}
