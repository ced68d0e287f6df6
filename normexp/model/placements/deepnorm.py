"""DeepNorm: Post-LN with an up-weighted residual and a β-scaled init, and its constants."""

from __future__ import annotations

from ...config.registry import register
from ...config.variants.placements.deepnorm import DeepNormSettings
from .base import PLACEMENTS, Placement


@register(PLACEMENTS, "deepnorm")
class DeepNorm(Placement):
    """DeepNorm (Wang et al. 2022, "DeepNet"): x ← Norm(α·x + F(x)), with F's value, output
    and MLP matrices initialised Xavier-normal with gain β (query and key with gain 1).

    α up-weights the residual (not F(x)); with α = (2N)^(1/4), β = (8N)^(-1/4) for N blocks
    ("auto": deepnorm_constants in config/variants/placements/deepnorm.py) the model update
    stays bounded as depth grows. Either may be a number instead. No final norm: the stream
    leaves every block normalized."""

    Settings = DeepNormSettings
    needs_final_norm = False

    def __init__(self, sublayer, make_norm, index: int, depth: int, **settings):
        super().__init__(depth, **settings)
        self.sublayer = sublayer
        self.alpha, self.init_gain = self.numbers["alpha"], self.numbers["beta"]
        self.norm = make_norm()

    def forward(self, x, *context):
        out = self.sublayer(x, *context)
        return self.norm(self.alpha * x + out), out
