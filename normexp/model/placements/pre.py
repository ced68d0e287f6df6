"""Pre-LN: the norm on the sublayer's input, a final norm after the last block."""

from __future__ import annotations

from ...config.registry import register
from ...config.variants.placements.pre import PreLNSettings
from .base import PLACEMENTS, Placement


@register(PLACEMENTS, "pre")
class PreNorm(Placement):
    """Pre-LN (Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture"):
    x ← x + F(Norm(x)); the model adds one final Norm after the last block."""

    Settings = PreLNSettings

    def __init__(self, sublayer, make_norm, index: int, depth: int):
        super().__init__(depth)
        self.norm = make_norm()
        self.sublayer = sublayer

    def forward(self, x, *context):
        out = self.sublayer(self.norm(x), *context)
        return x + out, out
