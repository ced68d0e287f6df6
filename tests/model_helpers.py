"""What the model's tests share (tests/model/ and its placements/): the width D, non-trivial parameters, a stand-in sublayer and
LayerNorm by hand."""

import math

import torch
import torch.nn as nn

from normexp.model.layers import Sublayer

D = 16


def randomize(module):
    """Non-trivial γ/β so a test cannot pass on the identity init."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.5 + (1.0 if p.dim() == 1 else 0.0))
    return module


class StandIn(Sublayer):
    """A stand-in sublayer F(x) = tanh(x @ W) with a fixed random W; no norm slots."""

    def __init__(self):
        super().__init__(D)
        self.w = torch.randn(D, D, generator=torch.Generator().manual_seed(7)) / math.sqrt(D)

    def forward(self, x):
        return torch.tanh(x @ self.w)


def by_hand_norm(x):
    """LayerNorm with γ = 1, β = 0, written out (biased variance, ε = 1e-5)."""
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)
