"""Gemma's RMSNorm: RMSNorm with its weight stored as an offset from 1 (norm=rms_gemma)."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...config.registry import register
from ...config.variants.norms.rms_gemma import GemmaRMSNormSettings
from .base import NORMS
from .rms import RMSNorm


@register(NORMS, "rms_gemma")
class GemmaRMSNorm(RMSNorm):
    """Gemma's RMSNorm (Gemma Team 2024, "Gemma: Open Models Based on Gemini Research and
    Technology"): y = x·rsqrt(mean(x²)+ε)·(1 + w), the learned weight stored as an offset w
    from 1, initialised at 0.

    The norm starts as the plain RMSNorm, and weight decay pulls the scale towards 1, not 0.
    Computed in float32 (the (1 + w) factor too) and cast back, as Gemma does; ε = 1e-6 there.
    Gemma's other half, the √d scale on the token embeddings, is the model's `scale_embeddings`
    (on by default)."""

    Settings = GemmaRMSNormSettings

    def __init__(self, d: int, **settings):
        super().__init__(d, **settings)
        self.weight = nn.Parameter(torch.zeros(d))  # the offset w from 1

    def forward(self, x):
        return (self.normalized(x) * (1.0 + self.weight.float())).type_as(x)
