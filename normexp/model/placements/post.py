"""Post-LN: the norm after the residual sum."""

from __future__ import annotations

from ...config.registry import register
from ...config.variants.placements.post import PostLNSettings
from .base import PLACEMENTS, Placement


@register(PLACEMENTS, "post")
class PostNorm(Placement):
    """Post-LN (Vaswani et al. 2017): x ← Norm(x + F(x)). No final norm is needed."""

    Settings = PostLNSettings

    needs_final_norm = False

    def __init__(self, sublayer, make_norm, index: int, depth: int):
        super().__init__(depth)
        self.sublayer = sublayer
        self.norm = make_norm()

    def forward(self, x, *context):
        out = self.sublayer(x, *context)
        return self.norm(x + out), out
