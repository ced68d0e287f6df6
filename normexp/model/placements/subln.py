"""Sub-LN (Magneto): Pre-LN plus a norm before each output projection, and its init gain."""

from __future__ import annotations

from ...config.registry import register
from ...config.variants.placements.subln import SubLNSettings
from ..layers import INNER_NORM
from .base import PLACEMENTS, Placement


@register(PLACEMENTS, "subln")
class SubLN(Placement):
    """Sub-LN / Magneto (Wang et al. 2022, "Foundation Transformers"): x ← x + F'(Norm(x)),
    where F' is F with a second norm right before its output projection (attention: on the
    heads' concatenated output, before W_O; MLP: after the activation, before W₂, width
    mlp_ratio·d), filled into the sublayer's INNER_NORM slot (a sublayer that declares no such
    slot, cross-attention, runs as Pre-LN). The value, attention output and both MLP matrices are
    initialised with gain γ = √(ln 2N) for N blocks, query and key with 1 (torchscale's
    `subln` multiplies their weights and biases by γ after drawing). The model adds a final
    Norm, as Pre-LN does."""

    Settings = SubLNSettings

    def __init__(self, sublayer, make_norm, index: int, depth: int):
        super().__init__(depth)
        self.norm = make_norm()
        if INNER_NORM in sublayer.norm_slots:
            sublayer.fill_slot(INNER_NORM, make_norm(sublayer.inner_width))
        self.sublayer = sublayer
        self.init_gain = self.numbers["gain"]

    def forward(self, x, *context):
        out = self.sublayer(self.norm(x), *context)
        return x + out, out
