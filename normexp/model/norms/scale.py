"""ScaleNorm: the token's L2 norm and one learned scale (norm=scale)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ...config.registry import register
from ...config.variants.norms.scale import ScaleNormSettings
from .base import NORMS, Norm


@register(NORMS, "scale")
class ScaleNorm(Norm):
    """ScaleNorm (Nguyen & Salazar 2019, "Transformers without Tears"): y = g·x / max(‖x‖, ε),
    ‖x‖ the L2 norm over the feature dim, one learnable scalar g initialised to √d (so the
    output's entries have unit RMS, as LayerNorm's do).

    Computed in float32 and cast back, as RMSNorm is."""

    Settings = ScaleNormSettings

    def __init__(self, d: int, **settings):
        super().__init__(**settings)
        self.eps = self.settings.eps
        self.scale = nn.Parameter(torch.tensor(math.sqrt(d)))

    def forward(self, x):
        x32 = x.float()
        y = x32 / x32.norm(dim=-1, keepdim=True).clamp_min(self.eps)
        return y.type_as(x) * self.scale
