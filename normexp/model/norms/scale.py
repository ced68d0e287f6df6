"""ScaleNorm: the token's L2 norm and one learned scale (norm=scale)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ...config.checks import is_positive_float32, require
from ...config.registry import register
from .base import NORMS


@register(NORMS, "scale")
class ScaleNorm(nn.Module):
    """ScaleNorm (Nguyen & Salazar 2019, "Transformers without Tears"): y = g·x / max(‖x‖, ε),
    ‖x‖ the L2 norm over the feature dim, one learnable scalar g initialised to √d (so the
    output's entries have unit RMS, as LayerNorm's do).

    Computed in float32 and cast back, as RMSNorm is."""

    def __init__(self, d: int, *, eps: float):
        super().__init__()
        require(is_positive_float32(eps), "norm.eps", eps, "must be a number > 0")
        self.eps = eps
        self.scale = nn.Parameter(torch.tensor(math.sqrt(d)))

    def forward(self, x):
        x32 = x.float()
        y = x32 / x32.norm(dim=-1, keepdim=True).clamp_min(self.eps)
        return y.type_as(x) * self.scale

    def resolved(self) -> dict:
        return {"eps": self.eps}
