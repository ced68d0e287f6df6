"""placement=deepnorm: its settings, their rules and the numbers worked out from them
(the placement itself: model/placements/deepnorm.py)."""

from __future__ import annotations

from ...checks import is_positive_float32, require
from ...registry import register
from ..base import PLACEMENT_SETTINGS, PlacementSettings


def deepnorm_constants(layers: int) -> tuple[float, float]:
    """DeepNorm's α = (2N)^(1/4) and β = (8N)^(-1/4) for a decoder-only stack of N blocks
    (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers", Table 1)."""
    return (2 * layers) ** 0.25, (8 * layers) ** -0.25


@register(PLACEMENT_SETTINGS, "deepnorm")
class DeepNormSettings(PlacementSettings):
    """DeepNorm's residual weight α and init gain β: each "auto" (deepnorm_constants for the
    depth) or a number > 0."""

    def __init__(self, *, alpha, beta):
        for key, value in (("alpha", alpha), ("beta", beta)):
            require(value == "auto" or is_positive_float32(value), f"placement.{key}", value, 'must be "auto" or a number > 0')
        self.alpha, self.beta = alpha, beta

    def resolved(self, depth: int) -> dict:
        auto_alpha, auto_beta = deepnorm_constants(depth)
        return {"alpha": auto_alpha if self.alpha == "auto" else float(self.alpha),
                "beta": auto_beta if self.beta == "auto" else float(self.beta)}
