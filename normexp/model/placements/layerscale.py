"""LayerScale: Pre-LN with a learned per-channel scale on the sublayer's output."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...config.registry import register
from ...config.variants.placements.layerscale import LayerScaleSettings
from .base import PLACEMENTS, Placement


@register(PLACEMENTS, "layerscale")
class LayerScale(Placement):
    """LayerScale (Touvron et al. 2021, "Going deeper with Image Transformers", CaiT):
    x ← x + diag(λ)·F(Norm(x)), a learnable per-channel scale λ initialised to ε, so every
    block starts close to the identity; the model adds a final Norm as Pre-LN does.
    init_scale "auto" is CaiT's rule for the depth: ε = 0.1 up to 18 blocks, 1e-5 up to 24,
    1e-6 deeper; or a number."""

    Settings = LayerScaleSettings

    def __init__(self, sublayer, make_norm, index: int, depth: int, **settings):
        super().__init__(depth, **settings)
        self.init_scale = self.numbers["init_scale"]
        self.norm = make_norm()
        self.sublayer = sublayer
        self.scale = nn.Parameter(torch.full((sublayer.d_model,), self.init_scale))

    def forward(self, x, *context):
        out = self.scale * self.sublayer(self.norm(x), *context)
        return x + out, out
