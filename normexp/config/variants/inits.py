"""The init schemes' settings: every scheme takes the one setting, `scale_positions`
(InitSettings, base.py); what each scheme draws is model/inits.py's."""

from __future__ import annotations

from ..registry import register
from .base import INIT_SETTINGS, InitSettings

register(INIT_SETTINGS, "xavier", "gpt2", "small", "torchscale", "mitchell")(InitSettings)
