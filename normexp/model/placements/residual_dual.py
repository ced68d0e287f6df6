"""ResiDual: a Post-LN stream and an accumulator side by side; its policy makes the pair from the
embedded input and the output x_a + Norm(x_d) from the last pair."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...config.registry import register
from ...config.variants.placements.residual_dual import ResiDualSettings
from .base import PLACEMENTS, ModelPolicy, Placement


class DualOutput(nn.Module):
    """ResiDual's output: y = x_a + Norm(x_d) from the stream (x_a, x_d) leaving the last block."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.norm = norm

    def forward(self, stream):
        post, dual = stream
        return post + self.norm(dual)


class DualStream(ModelPolicy):
    """ResiDual's model-level half: the embedded input x enters as the pair (x, x), and the
    pair leaving the last block goes through `DualOutput`."""

    def enter(self, x):
        return x, x

    def make_final(self, make_norm) -> nn.Module:
        return DualOutput(make_norm())


@register(PLACEMENTS, "residual_dual")
class ResiDual(Placement):
    """ResiDual (Xie et al. 2023, "ResiDual: Transformer with Dual Residual Connections"):
    two streams side by side, a Post-LN one and a Pre-LN-style accumulator of the raw
    sublayer outputs,

        x_a ← Norm(x_a + F(x_a)),   x_d ← x_d + F(x_a),   output y = x_a + Norm(x_d),

    both starting from the embedded input (x_a = x_d = x, as the authors' code does). The
    stream between blocks is the pair (x_a, x_d); the instruments read x_a as the residual
    stream (act_std: a Post-LN stream, so about 1 in every block), F(x_a) as the contribution.
    The final module is the output's Norm(x_d) plus x_a, so the model has a final norm (its
    policy, `DualStream`, makes the pair and the output)."""

    Settings = ResiDualSettings

    model_policy = DualStream
    needs_final_norm = False  # x_a leaves every block normalized; the final module is DualOutput

    def __init__(self, sublayer, make_norm, index: int, depth: int):
        super().__init__(depth)
        self.sublayer = sublayer
        self.norm = make_norm()

    def forward(self, stream, *context):
        post, dual = stream
        out = self.sublayer(post, *context)
        return (self.norm(post + out), dual + out), out

    @staticmethod
    def residual(stream) -> torch.Tensor:
        return stream[0]
