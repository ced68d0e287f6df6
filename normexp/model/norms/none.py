"""No normalization: the identity, the control (norm=none)."""

from __future__ import annotations

import torch.nn as nn

from ...config.registry import register
from .base import NORMS


@register(NORMS, "none")
class NoNorm(nn.Identity):
    """No normalization: y = x, the control every norm is compared against."""

    bounds_scale = False  # the stream's scale is left to grow: its losses are pinned as far as rounding allows
    normalizes = False    # qk_norm=true beside it would normalize nothing

    def __init__(self, d: int):
        super().__init__()

    def resolved(self) -> dict:
        return {}
