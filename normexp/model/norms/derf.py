"""Derf: a learned, shifted erf in place of a norm (norm=derf)."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...config.checks import is_float32, is_positive_float32, require
from ...config.registry import register
from .base import NORMS


@register(NORMS, "derf")
class DynamicErf(nn.Module):
    """Derf (Chen et al. 2025, "Stronger Normalization-Free Transformers", arXiv 2512.10938):
    y = γ·erf(α·x + s) + β, one learnable scalar α (from init_alpha, 0.5) and shift s (from
    init_shift, 0), per-feature γ (from 1) and β (from 0).

    A point-wise, DyT-like replacement for the norm (α one scalar, as DyT's): no statistics over
    the token, each element is mapped on its own."""

    def __init__(self, d: int, *, init_alpha: float, init_shift: float):
        super().__init__()
        require(is_positive_float32(init_alpha), "norm.init_alpha", init_alpha, "must be a number > 0")
        require(is_float32(init_shift), "norm.init_shift", init_shift, "must be a finite number (the paper starts s at 0)")
        self.init_alpha, self.init_shift = init_alpha, init_shift
        self.alpha = nn.Parameter(torch.tensor(float(init_alpha)))
        self.shift = nn.Parameter(torch.tensor(float(init_shift)))
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return torch.erf(self.alpha * x + self.shift) * self.weight + self.bias

    def resolved(self) -> dict:
        return {"init_alpha": self.init_alpha, "init_shift": self.init_shift}
