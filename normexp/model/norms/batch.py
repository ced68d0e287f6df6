"""BatchNorm over batch × time, per feature (norm=batch): a study option, leaks across tokens."""

from __future__ import annotations

import torch.nn as nn

from ...config.registry import register
from ...config.variants.norms.batch import BatchNormSettings
from .base import NORMS, Norm


@register(NORMS, "batch")
class BatchNorm(Norm):
    """BatchNorm (Ioffe & Szegedy 2015) over all batch×time tokens, per feature:
    y = γ·(x−μ_B)/√(σ²_B+ε) + β in training, running statistics in eval.

    Caution: in a causal LM the batch statistics mix information across positions and
    samples during training (a token "sees" the future through μ_B, σ²_B). It is kept as a
    study option (Shen et al. 2020, "PowerNorm", discuss why it fails in Transformers)."""

    Settings = BatchNormSettings

    def __init__(self, d: int, **settings):
        super().__init__(**settings)
        self.bn = nn.BatchNorm1d(d, eps=self.settings.eps, momentum=self.settings.momentum)

    def forward(self, x):
        return self.bn(x.reshape(-1, x.shape[-1])).view_as(x)
