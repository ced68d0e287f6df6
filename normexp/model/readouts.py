"""What the model lets an instrument read, declared by the modules themselves (`readouts()`)
rather than reached by attribute chains; `read_outputs` attaches forward hooks for the
length of a `with` block only, so a forward outside one runs no added code."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch.nn as nn


def _whole(out):
    return out


def _first(out):
    return out[0]


def _second(out):
    return out[1]


@dataclass(frozen=True)
class Readout:
    """A tensor an instrument may read: `pick` applied to `module`'s output (read="output")
    or to its positional inputs (read="input") on each forward."""

    module: nn.Module
    pick: Callable = _whole
    read: str = "output"


@contextlib.contextmanager
def read_outputs(readouts: dict[str, list[Readout]]) -> Iterator[dict[str, list]]:
    """Within the block, every forward fills {name: [detached tensor per Readout]} (the last
    forward's, in the Readouts' order); the hooks are removed on leaving it."""
    read = {name: [None] * len(places) for name, places in readouts.items()}
    handles = []

    def keep(name, i, pick):
        def hook(module, inputs, output=None):
            read[name][i] = pick(inputs if output is None else output).detach()
        return hook

    try:
        for name, places in readouts.items():
            for i, r in enumerate(places):
                hook = keep(name, i, r.pick)
                handles.append(r.module.register_forward_pre_hook(hook) if r.read == "input"
                               else r.module.register_forward_hook(hook))
        yield read
    finally:
        for handle in handles:
            handle.remove()
