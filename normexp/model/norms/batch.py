"""BatchNorm over batch × time, per feature (norm=batch): a study option, leaks across tokens."""

from __future__ import annotations

import torch.nn as nn

from ...config.checks import is_positive_float32, require
from ...config.registry import register
from .base import NORMS


@register(NORMS, "batch")
class BatchNorm(nn.Module):
    """BatchNorm (Ioffe & Szegedy 2015) over all batch×time tokens, per feature:
    y = γ·(x−μ_B)/√(σ²_B+ε) + β in training, running statistics in eval.

    Caution: in a causal LM the batch statistics mix information across positions and
    samples during training (a token "sees" the future through μ_B, σ²_B). It is kept as a
    study option (Shen et al. 2020, "PowerNorm", discuss why it fails in Transformers)."""

    unpackable = "BatchNorm's batch statistics and running buffers are per model, not per row"

    def __init__(self, d: int, *, eps: float, momentum: float):
        super().__init__()
        require(is_positive_float32(eps), "norm.eps", eps, "must be a number > 0")
        require(is_positive_float32(momentum) and momentum <= 1, "norm.momentum", momentum, "must be a number in (0, 1]")
        self.bn = nn.BatchNorm1d(d, eps=eps, momentum=momentum)

    def forward(self, x):
        return self.bn(x.reshape(-1, x.shape[-1])).view_as(x)

    def resolved(self) -> dict:
        return {"eps": self.bn.eps, "momentum": self.bn.momentum}
