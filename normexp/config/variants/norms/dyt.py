"""norm=dyt: its settings and their rules
(the norm itself: model/norms/dyt.py)."""

from __future__ import annotations

from ...checks import is_positive_float32, require
from ...registry import register
from ..base import NORM_SETTINGS, NormSettings


@register(NORM_SETTINGS, "dyt")
class DyTSettings(NormSettings):
    """DyT's starting α."""

    def __init__(self, *, init_alpha: float):
        require(is_positive_float32(init_alpha), "norm.init_alpha", init_alpha, "must be a number > 0")
        self.init_alpha = init_alpha

    def resolved(self) -> dict:
        return {"init_alpha": self.init_alpha}
