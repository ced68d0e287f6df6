"""Each placement's settings class, one module per placement (named as its module in
model/placements/), each registered in PLACEMENT_SETTINGS by the placement's name; every module
here is imported below, so a new placement's settings are one module added here: no list to extend."""

import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")
