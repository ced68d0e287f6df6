"""The norms' registry and the contract each norm keeps.

    NORMS[name](d, **settings)

* `d` is the width normalized over (the last dimension of the input).
* `settings` are the keyword-only parameters of the norm's settings class, `Settings`
  (config/variants/norms/<name>.py, registered there by the same name): their values live in
  configs/norm/<name>.yaml only, and config/registry.py's `variant` fills the ones a caller
  leaves out from there (tests/config/test_registry.py checks the three agree). `Norm.__init__`
  builds `self.settings` from them, so a bad value is refused by the one rule the pre-flight
  asks too.
* `forward(x)` returns a tensor of x's shape and dtype.
* `resolved()` gives the settings the norm was built with (summary.json's norm_settings).
* `bounds_scale = False` on a norm whose output's scale is not bounded whatever its input's (the
  identity): tests/train/test_numerics.py then lets its runs' rounding differences end the pinned
  steps early (True when absent).
* What the pre-flight and the packs ask without building a norm (`normalizes`, `unpackable`) is
  declared on its settings class.
* The class docstring gives the formula and the paper it comes from: docs and `normexp` list
  them from there.
"""

from __future__ import annotations

import torch.nn as nn

from ...config.variants import NormSettings

NORMS: dict[str, type[Norm]] = {}


class Norm(nn.Module):
    """A norm's module: `self.settings`, its settings object, built from the settings given."""

    Settings: type[NormSettings] = NormSettings
    bounds_scale = True

    def __init__(self, **settings):
        super().__init__()
        self.settings = self.Settings(**settings)

    def resolved(self) -> dict:
        return self.settings.resolved()
