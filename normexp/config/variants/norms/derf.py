"""norm=derf: its settings and their rules
(the norm itself: model/norms/derf.py)."""

from __future__ import annotations

from ...checks import is_float32, is_positive_float32, require
from ...registry import register
from ..base import NORM_SETTINGS, NormSettings


@register(NORM_SETTINGS, "derf")
class DerfSettings(NormSettings):
    """Derf's starting α and shift s."""

    def __init__(self, *, init_alpha: float, init_shift: float):
        require(is_positive_float32(init_alpha), "norm.init_alpha", init_alpha, "must be a number > 0")
        require(is_float32(init_shift), "norm.init_shift", init_shift, "must be a finite number (the paper starts s at 0)")
        self.init_alpha, self.init_shift = init_alpha, init_shift

    def resolved(self) -> dict:
        return {"init_alpha": self.init_alpha, "init_shift": self.init_shift}
