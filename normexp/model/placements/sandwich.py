"""Sandwich-LN / Peri-LN: a norm on the sublayer's input and one on its output."""

from __future__ import annotations

from ...config.registry import register
from ...config.variants.placements.sandwich import SandwichSettings
from .base import PLACEMENTS, Placement


@register(PLACEMENTS, "sandwich", "peri")
class SandwichNorm(Placement):
    """Sandwich-LN (Ding et al. 2021, CogView) / Peri-LN (Kim et al. 2025):
    x ← x + Norm_out(F(Norm_in(x))); the model adds a final Norm as Pre-LN does."""

    Settings = SandwichSettings

    def __init__(self, sublayer, make_norm, index: int, depth: int):
        super().__init__(depth)
        self.norm_in = make_norm()
        self.sublayer = sublayer
        self.norm_out = make_norm()

    def forward(self, x, *context):
        out = self.norm_out(self.sublayer(self.norm_in(x), *context))
        return x + out, out
