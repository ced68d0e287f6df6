"""The per-layer signals: one small class each, registered by tag (base.py holds the contract).
Every module here is imported below, so a new signal is one module here: the instruments compute
it, TensorBoard charts it and the report reads its description without a list to extend.

`LAYER_FAMILIES` and `HEAD_FAMILIES` are the registered per-block and per-head signals by tag,
in chart order."""

import importlib
import pkgutil

from .base import FORWARD, GRADIENTS, LAYER_SIGNALS, MOMENTS, UPDATE, LayerSignal, layer_signal, signals

for _module in sorted(m.name for m in pkgutil.iter_modules(__path__)):
    importlib.import_module(f"{__name__}.{_module}")

LAYER_FAMILIES = {s.tag: s for s in signals(per_head=False)}
HEAD_FAMILIES = {s.tag: s for s in signals(per_head=True)}

__all__ = ["FORWARD", "GRADIENTS", "HEAD_FAMILIES", "LAYER_FAMILIES", "LAYER_SIGNALS", "MOMENTS", "UPDATE",
           "LayerSignal", "layer_signal", "signals"]
