"""Admin: Post-LN with a per-channel residual weight set by a profiling pass."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ...config.registry import register
from ...config.variants.placements.admin import AdminSettings
from .base import PLACEMENTS, Placement


@register(PLACEMENTS, "admin")
class Admin(Placement):
    """Admin (Liu et al. 2020, "Understanding the Difficulty of Training Transformers"):
    Post-LN with a learnable per-channel residual weight, x ← Norm(ω·x + F(x)).

    ω is set by a profiling forward pass at initialisation (`GPT.calibrate`): with ω = 1,
    each sublayer i records Var[F_i(x)] (over all its outputs); then, counting sublayers
    in the order the stream meets them, ω_i = √(Var[x_0] + Σ_{j<i} Var[F_j]), the variance
    the stream has gathered before sublayer i (x_0, the embedded input, is the first term:
    without it the first ω would be 0 and the first sublayer would drop its input). Deep
    stacks so lean on the residual as their outputs add up, the paper's fix for Post-LN's
    amplified output changes. No final norm."""

    Settings = AdminSettings
    needs_final_norm = False
    needs_calibration = True

    def __init__(self, sublayer, make_norm, index: int, depth: int):
        super().__init__(depth)
        self.sublayer = sublayer
        self.omega = nn.Parameter(torch.ones(sublayer.d_model))
        self.norm = make_norm()

    def forward(self, x, *context):
        out = self.sublayer(x, *context)
        return self.norm(self.omega * x + out), out

    def start_calibration(self) -> None:
        self.omega.fill_(1.0)

    def calibrate(self, variance: float) -> None:
        """ω = √(the variance the stream has gathered before this sublayer)."""
        self.omega.fill_(math.sqrt(variance))
