"""What the model's tests share: the width D, non-trivial parameters, a stand-in sublayer and
LayerNorm by hand."""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

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
        self.w = torch.randn(D, D) / math.sqrt(D)

    def forward(self, x):
        return torch.tanh(x @ self.w)


def by_hand_norm(x):
    return F.layer_norm(x, (D,), eps=1e-5)
