"""norm=batch: its settings and their rules
(the norm itself: model/norms/batch.py)."""

from __future__ import annotations

from ...checks import is_positive_float32, require
from ...registry import register
from ..base import NORM_SETTINGS, EpsSettings


@register(NORM_SETTINGS, "batch")
class BatchNormSettings(EpsSettings):
    """BatchNorm's ε and the momentum of its running statistics."""

    unpackable = "BatchNorm's batch statistics and running buffers are per model, not per row"

    def __init__(self, *, eps: float, momentum: float):
        super().__init__(eps=eps)
        require(is_positive_float32(momentum) and momentum <= 1, "norm.momentum", momentum, "must be a number in (0, 1]")
        self.momentum = momentum

    def resolved(self) -> dict:
        return {"eps": self.eps, "momentum": self.momentum}
