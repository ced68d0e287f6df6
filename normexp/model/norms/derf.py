"""Derf: a learned, shifted erf in place of a norm (norm=derf)."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...config.registry import register
from ...config.variants.norms.derf import DerfSettings
from .base import NORMS, Norm


@register(NORMS, "derf")
class DynamicErf(Norm):
    """Derf (Chen et al. 2025, "Stronger Normalization-Free Transformers", arXiv 2512.10938):
    y = γ·erf(α·x + s) + β, one learnable scalar α (from init_alpha, 0.5) and shift s (from
    init_shift, 0), per-feature γ (from 1) and β (from 0).

    A point-wise, DyT-like replacement for the norm (α one scalar, as DyT's): no statistics over
    the token, each element is mapped on its own."""

    Settings = DerfSettings

    def __init__(self, d: int, **settings):
        super().__init__(**settings)
        self.alpha = nn.Parameter(torch.tensor(float(self.settings.init_alpha)))
        self.shift = nn.Parameter(torch.tensor(float(self.settings.init_shift)))
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return torch.erf(self.alpha * x + self.shift) * self.weight + self.bias
