"""ReZero: no norm, the sublayer's output times a learned scalar from 0."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...config.registry import register
from ...config.variants.placements.rezero import ReZeroSettings
from .base import PLACEMENTS, Placement


@register(PLACEMENTS, "rezero")
class ReZero(Placement):
    """ReZero (Bachlechner et al. 2020, "ReZero is All You Need"): x ← x + α·F(x), one
    learnable scalar α per sublayer initialised to init_alpha (0 in the paper, so every
    block starts as the identity). No norm anywhere: the run's norm type is not used and the
    model has no final norm."""

    Settings = ReZeroSettings  # reads: no norm of its own, the norm type only through QK-norm
    needs_final_norm = False

    def __init__(self, sublayer, make_norm, index: int, depth: int, **settings):
        super().__init__(depth, **settings)
        self.sublayer = sublayer
        self.alpha = nn.Parameter(torch.tensor(self.settings.init_alpha))

    def forward(self, x, *context):
        out = self.alpha * self.sublayer(x, *context)
        return x + out, out
