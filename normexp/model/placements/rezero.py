"""ReZero: no norm, the sublayer's output times a learned scalar from 0."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...config.checks import is_float32, require
from ...config.registry import register
from .base import PLACEMENTS, Placement


@register(PLACEMENTS, "rezero")
class ReZero(Placement):
    """ReZero (Bachlechner et al. 2020, "ReZero is All You Need"): x ← x + α·F(x), one
    learnable scalar α per sublayer initialised to init_alpha (0 in the paper, so every
    block starts as the identity). No norm anywhere: the run's norm type is not used and the
    model has no final norm."""

    needs_final_norm = False
    # no norm of its own: the norm type reaches the model only through QK-norm (qk_norm=true)
    reads = frozenset({"qk_norm", "scale_embeddings"})

    def __init__(self, sublayer, make_norm, index: int, depth: int, *, init_alpha: float):
        super().__init__()
        require(is_float32(init_alpha), "placement.init_alpha", init_alpha, "must be a finite number")
        self.sublayer = sublayer
        self.alpha = nn.Parameter(torch.tensor(float(init_alpha)))
        self.init_alpha = float(init_alpha)

    def forward(self, x, *context):
        out = self.alpha * self.sublayer(x, *context)
        return x + out, out

    def resolved(self) -> dict:
        return {"init_alpha": self.init_alpha}
