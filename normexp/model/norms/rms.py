"""RMSNorm: scale each token's features by their root mean square (norm=rms)."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...config.registry import register
from ...config.variants.norms.rms import RMSNormSettings
from .base import NORMS, Norm


@register(NORMS, "rms")
class RMSNorm(Norm):
    """RMSNorm (Zhang & Sennrich 2019): y = γ·x·rsqrt(mean(x²)+ε).

    Computed in float32 and cast back, so bf16 activations do not lose the statistic."""

    Settings = RMSNormSettings

    def __init__(self, d: int, **settings):
        super().__init__(**settings)
        self.eps = self.settings.eps
        self.weight = nn.Parameter(torch.ones(d))

    def normalized(self, x: torch.Tensor) -> torch.Tensor:
        """x·rsqrt(mean(x²)+ε), in float32."""
        x32 = x.float()
        return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self.normalized(x).type_as(x) * self.weight
