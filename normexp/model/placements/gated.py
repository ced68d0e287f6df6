"""Gated residual (GTrXL): a GRU-type gate in place of the residual sum."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...config.registry import register
from ...config.variants.placements.gated import GatedResidualSettings
from ..layers import CausalSelfAttention
from .base import PLACEMENTS, Placement


@register(PLACEMENTS, "gated")
class GatedResidual(Placement):
    """Gated residual (Parisotto et al. 2019, "Stabilizing Transformers for Reinforcement
    Learning", GTrXL's GRU-type gate; x-transformers' `gate_residual`): the addition x + y is
    replaced by a gate g(x, y), y = F(Norm(x)) (the identity-map reordering, i.e. Pre-LN):

        r = σ(W_r·y + U_r·x),   z = σ(W_z·y + U_z·x − b_g),   ĥ = tanh(W_g·y + U_g·(r ⊙ x)),
        x ← (1 − z) ⊙ x + z ⊙ ĥ.

    b_g, one per channel and learnable, starts at gate_bias (2, the value GTrXL reports; its
    text could not be re-read here), so z ≈ σ(−2) ≈ 0.12 and each block starts near the identity. The six d×d matrices belong to the
    placement and are drawn Xavier-normal (gain 1) whatever the run's init scheme. The
    contribution is the change it makes, g − x. The model adds a final Norm, as Pre-LN does.

    The authors' code (opendilab/DI-engine's gtrxl.py) also puts a ReLU on the self-attention's
    output before the gate, y = ReLU(Attn(Norm(x))): that is a setting, `attention_relu`,
    false by default (the formula above, as x-transformers does and as shipped before issue 29,
    so recorded runs stay comparable); true is the authors' form. The MLP's y has no ReLU
    either way."""

    Settings = GatedResidualSettings

    def __init__(self, sublayer, make_norm, index: int, depth: int, **settings):
        super().__init__(depth, **settings)
        self.relu = self.settings.attention_relu and isinstance(sublayer, CausalSelfAttention)
        d = sublayer.d_model
        self.norm = make_norm()
        self.sublayer = sublayer
        self.gate_bias = self.settings.gate_bias
        self.from_y = nn.Linear(d, 3 * d, bias=False)  # W_r, W_z, W_g stacked
        self.from_x = nn.Linear(d, 2 * d, bias=False)  # U_r, U_z stacked
        self.from_reset = nn.Linear(d, d, bias=False)  # U_g
        self.bias = nn.Parameter(torch.full((d,), self.gate_bias))
        for w in (*self.from_y.weight.data.split(d), *self.from_x.weight.data.split(d), self.from_reset.weight.data):
            nn.init.xavier_normal_(w)  # each d×d matrix on its own

    def forward(self, x, *context):
        y = self.sublayer(self.norm(x), *context)
        if self.relu:
            y = torch.relu(y)
        wr, wz, wg = self.from_y(y).chunk(3, dim=-1)
        ur, uz = self.from_x(x).chunk(2, dim=-1)
        r = torch.sigmoid(wr + ur)
        z = torch.sigmoid(wz + uz - self.bias)
        h = torch.tanh(wg + self.from_reset(r * x))
        out = z * (h - x)  # (1 − z)·x + z·ĥ = x + z·(ĥ − x)
        return x + out, out
