"""What normalizes: one norm per module of this package, each a class that registers itself in
NORMS by name (base.py holds the contract). Every module here is imported below, so a new norm
is one module here, its settings class (config/variants/norms/<name>.py) and one yaml file in
configs/norm/ with exactly its settings: no list to extend."""

import importlib
import pkgutil

from .base import NORMS

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")

from .batch import BatchNorm  # noqa: E402  (model/packed.py builds these two by type)
from .layer import LayerNorm  # noqa: E402

__all__ = ["NORMS", "BatchNorm", "LayerNorm"]
