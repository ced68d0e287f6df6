"""LayerNorm: centre and scale each token's features (norm=layer)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...config.checks import is_positive_float32, require
from ...config.registry import register
from .base import NORMS


@register(NORMS, "layer")
class LayerNorm(nn.Module):
    """LayerNorm (Ba et al. 2016): y = γ·(x−μ)/√(σ²+ε) + β, μ and biased σ² over the feature dim."""

    def __init__(self, d: int, *, eps: float):
        super().__init__()
        require(is_positive_float32(eps), "norm.eps", eps, "must be a number > 0")
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)

    def resolved(self) -> dict:
        return {"eps": self.eps}
