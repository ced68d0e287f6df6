"""LayerNorm: centre and scale each token's features (norm=layer)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ...config.registry import register
from ...config.variants.norms.layer import LayerNormSettings
from .base import NORMS, Norm


@register(NORMS, "layer")
class LayerNorm(Norm):
    """LayerNorm (Ba et al. 2016): y = γ·(x−μ)/√(σ²+ε) + β, μ and biased σ² over the feature dim."""

    Settings = LayerNormSettings

    def __init__(self, d: int, **settings):
        super().__init__(**settings)
        self.eps = self.settings.eps
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)
