"""DeepNorm: Post-LN with an up-weighted residual and a β-scaled init, and its constants."""

from __future__ import annotations

from ...config.checks import is_positive_float32, require
from ...config.registry import register
from .base import PLACEMENTS, Placement


def deepnorm_constants(layers: int) -> tuple[float, float]:
    """DeepNorm's α = (2N)^(1/4) and β = (8N)^(-1/4) for a decoder-only stack of N blocks
    (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers", Table 1)."""
    return (2 * layers) ** 0.25, (8 * layers) ** -0.25


@register(PLACEMENTS, "deepnorm")
class DeepNorm(Placement):
    """DeepNorm (Wang et al. 2022, "DeepNet"): x ← Norm(α·x + F(x)), with F's value, output
    and MLP matrices initialised Xavier-normal with gain β (query and key with gain 1).

    α up-weights the residual (not F(x)); with α = (2N)^(1/4), β = (8N)^(-1/4) for N blocks
    ("auto") the model update stays bounded as depth grows. Either may be a number instead.
    No final norm: the stream leaves every block normalized."""

    needs_final_norm = False

    def __init__(self, sublayer, make_norm, index: int, depth: int, *, alpha, beta):
        super().__init__()
        self.sublayer = sublayer
        for key, value in (("alpha", alpha), ("beta", beta)):
            require(value == "auto" or is_positive_float32(value), f"placement.{key}", value, 'must be "auto" or a number > 0')
        auto_alpha, auto_beta = deepnorm_constants(depth)
        self.alpha = auto_alpha if alpha == "auto" else float(alpha)
        self.init_gain = auto_beta if beta == "auto" else float(beta)
        self.norm = make_norm()

    def forward(self, x, *context):
        out = self.sublayer(x, *context)
        return self.norm(self.alpha * x + out), out

    def resolved(self) -> dict:
        return {"alpha": self.alpha, "beta": self.init_gain}
