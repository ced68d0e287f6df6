"""norm=batch: its settings and their rules
(the norm itself: model/norms/batch.py)."""

from __future__ import annotations

from ...checks import is_positive_float32, require
from ...registry import register
from ..base import NORM_SETTINGS, NormSettings


@register(NORM_SETTINGS, "batch")
class BatchNormSettings(NormSettings):
    """BatchNorm's ε and the momentum of its running statistics."""

    unpackable = "BatchNorm's batch statistics and running buffers are per model, not per row"

    def __init__(self, *, eps: float, momentum: float):
        require(is_positive_float32(eps), "norm.eps", eps, "must be a number > 0")
        require(is_positive_float32(momentum) and momentum <= 1, "norm.momentum", momentum, "must be a number in (0, 1]")
        self.eps, self.momentum = eps, momentum

    def resolved(self) -> dict:
        return {"eps": self.eps, "momentum": self.momentum}
