"""OLMo 2's reordered norm: the norm on the sublayer's output."""

from __future__ import annotations

from ...config.registry import register
from ...config.variants.placements.reordered import ReorderedSettings
from .base import PLACEMENTS, Placement


@register(PLACEMENTS, "reordered")
class ReorderedNorm(Placement):
    """OLMo 2's "reordered norm" (Team OLMo 2024, "2 OLMo 2 Furious"; allenai/OLMo's
    `norm_after`): the norm moves from the sublayer's input to its output, x ← x + Norm(F(x)),
    with no norm on the input. The stream itself is never normalized, so the model adds a
    final Norm. (OLMo 2 also normalizes q and k, over the full width, and uses z-loss 1e-5:
    here `qk_norm`, per head, and `z_loss` are switches of their own.)"""

    Settings = ReorderedSettings

    def __init__(self, sublayer, make_norm, index: int, depth: int):
        super().__init__(depth)
        self.sublayer = sublayer
        self.norm = make_norm()

    def forward(self, x, *context):
        out = self.norm(self.sublayer(x, *context))
        return x + out, out
