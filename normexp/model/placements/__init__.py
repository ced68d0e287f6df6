"""Where the norm sits around each sublayer: one placement per module of this package, each a
`Placement` subclass that registers itself in PLACEMENTS by name (base.py holds the contract,
`Placement` for one sublayer and `ModelPolicy` for the whole model), picked by name:

    PLACEMENTS[name](sublayer, make_norm, index=block, depth=layers, **settings)

`settings` are the keyword-only parameters of the placement's settings class (its `Settings`,
config/variants/placements/<name>.py, torch-free), written without defaults: their values live
in configs/placement/<name>.yaml only, filled in by config/registry.py's `variant`. Every module
here is imported below, so a new placement is one module here (its class, its helpers, its
policy if it has one), its settings module, one yaml file and one test file
(tests/model/placements/test_<name>.py): no list to extend.
"""

import importlib
import pkgutil

from .base import PLACEMENTS, ModelPolicy, Placement

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")

__all__ = ["PLACEMENTS", "ModelPolicy", "Placement"]
