"""No normalization: the identity, the control (norm=none)."""

from __future__ import annotations

import torch.nn as nn

from ...config.registry import register
from ...config.variants.norms.none import NoNormSettings
from .base import NORMS, Norm


@register(NORMS, "none")
class NoNorm(Norm, nn.Identity):
    """No normalization: y = x, the control every norm is compared against."""

    Settings = NoNormSettings
    bounds_scale = False  # the stream's scale is left to grow: its losses are pinned as far as rounding allows

    def __init__(self, d: int):
        super().__init__()
