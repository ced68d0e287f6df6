"""Each norm's settings class, one module per norm (named as its module in model/norms/), each
registered in NORM_SETTINGS by the norm's name; every module here is imported below, so a new
norm's settings are one module added here: no list to extend."""

import importlib
import pkgutil

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")
