"""DyT: a learned tanh in place of a norm (norm=dyt)."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...config.checks import is_positive_float32, require
from ...config.registry import register
from .base import NORMS


@register(NORMS, "dyt")
class DynamicTanh(nn.Module):
    """DyT (Zhu et al. 2025, "Transformers without Normalization"): y = γ·tanh(a·x) + β,
    with one learnable scalar a (initialised to init_alpha, 0.5 in the paper) and per-feature γ, β."""

    def __init__(self, d: int, *, init_alpha: float):
        super().__init__()
        require(is_positive_float32(init_alpha), "norm.init_alpha", init_alpha, "must be a number > 0")
        self.init_alpha = init_alpha
        self.alpha = nn.Parameter(torch.tensor(float(init_alpha)))
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return torch.tanh(self.alpha * x) * self.weight + self.bias

    def resolved(self) -> dict:
        return {"init_alpha": self.init_alpha}
