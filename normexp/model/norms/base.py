"""The norms' registry and the contract each norm keeps.

    NORMS[name](d, **settings)

* `d` is the width normalized over (the last dimension of the input).
* `settings` are the constructor's keyword-only parameters, written without defaults: their
  values live in configs/norm/<name>.yaml only, and config/registry.py's `variant` fills the
  ones a caller leaves out from there (tests/config/test_registry.py checks the two agree).
* `forward(x)` returns a tensor of x's shape and dtype.
* `resolved()` gives the settings the norm was built with (summary.json's norm_settings).
* `bounds_scale = False` on a norm whose output's scale is not bounded whatever its input's (the
  identity): tests/train/test_numerics.py then lets its runs' rounding differences end the pinned
  steps early (True when absent).
* `normalizes = False` on a norm that leaves its input as it is (the identity): QK-norm with it
  computes nothing, so the pre-flight refuses qk_norm=true beside it (model/gpt.py
  `check_settings_read`; True when absent).
* `unpackable = "<why>"` on a norm a pack (model/packed.py) cannot compute as its members would
  alone (BatchNorm): `pack_refusal` refuses it with that reason in its one line, and such a run
  trains alone (None when absent).
* The class docstring gives the formula and the paper it comes from: docs and `normexp` list
  them from there.
"""

from __future__ import annotations

import torch.nn as nn

NORMS: dict[str, type[nn.Module]] = {}
