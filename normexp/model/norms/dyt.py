"""DyT: a learned tanh in place of a norm (norm=dyt)."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...config.registry import register
from ...config.variants.norms.dyt import DyTSettings
from .base import NORMS, Norm


@register(NORMS, "dyt")
class DynamicTanh(Norm):
    """DyT (Zhu et al. 2025, "Transformers without Normalization"): y = γ·tanh(a·x) + β,
    with one learnable scalar a (initialised to init_alpha, 0.5 in the paper) and per-feature γ, β."""

    Settings = DyTSettings

    def __init__(self, d: int, **settings):
        super().__init__(**settings)
        self.init_alpha = self.settings.init_alpha
        self.alpha = nn.Parameter(torch.tensor(float(self.init_alpha)))
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return torch.tanh(self.alpha * x) * self.weight + self.bias
