"""LayerScale: Pre-LN with a learned per-channel scale on the sublayer's output."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...config.checks import is_positive_float32, require
from ...config.registry import register
from .base import PLACEMENTS, Placement


@register(PLACEMENTS, "layerscale")
class LayerScale(Placement):
    """LayerScale (Touvron et al. 2021, "Going deeper with Image Transformers", CaiT):
    x ← x + diag(λ)·F(Norm(x)), a learnable per-channel scale λ initialised to ε, so every
    block starts close to the identity; the model adds a final Norm as Pre-LN does.
    init_scale "auto" is CaiT's rule for the depth: ε = 0.1 up to 18 blocks, 1e-5 up to 24,
    1e-6 deeper; or a number."""

    def __init__(self, sublayer, make_norm, index: int, depth: int, *, init_scale):
        super().__init__()
        # above 1 the branch starts larger than Pre-LN's, the opposite of what LayerScale is for
        require(init_scale == "auto" or (is_positive_float32(init_scale) and init_scale <= 1), "placement.init_scale",
               init_scale, 'must be "auto" or a number in (0, 1] (CaiT uses 0.1 to 1e-6)')
        self.init_scale = (0.1 if depth <= 18 else 1e-5 if depth <= 24 else 1e-6) if init_scale == "auto" else float(init_scale)
        self.norm = make_norm()
        self.sublayer = sublayer
        self.scale = nn.Parameter(torch.full((sublayer.d_model,), self.init_scale))

    def forward(self, x, *context):
        out = self.scale * self.sublayer(self.norm(x), *context)
        return x + out, out

    def resolved(self) -> dict:
        return {"init_scale": self.init_scale}
