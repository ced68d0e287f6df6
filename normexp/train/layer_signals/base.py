"""The per-layer signals' registry: each signal a small class carrying its tag, its description,
how it is shown and what it computes, registered by `@layer_signal`.

A signal computes one value per block (or per block and head) from a *reading* of one phase
of a logging step, which the instruments build (train/instruments.py) and which offers the
measurements signals share (one multi-tensor std, one batched attention pass, the parameter
groups' norms), so that a signal's `compute` is a line and the step still costs one
host–device sync:

    FORWARD    after the recorded forward: `reading.std(name)`, `reading.attention()[key]`,
               `reading.each_block(name, measure)` (any measure of each block's tensor)
    GRADIENTS  after backward: `reading.per_block` (‖grad‖ per block), `reading.per_tensor`, ...
    UPDATE     after the optimizer step: `reading.ratio` (‖Δθ‖/‖θ‖ per group), `reading.per_tensor`
    MOMENTS    after the step, with log.extra_signals: `reading.moment_norms(state_key)`

The signal is logged as `<tag>/layer_XX` (per_head: `<tag>/layer_XX/head_YY`); TensorBoard's
layout charts every registered signal, the depth-profile image draws those with a
profile_title, and `normexp report` draws those in_report over depth. Torch-free (a signal
computes with its reading's and the tensors' own methods): the report reads the descriptions
without loading torch.
"""

from __future__ import annotations

FORWARD, GRADIENTS, UPDATE, MOMENTS = "forward", "gradients", "update", "moments"


class LayerSignal:
    tag: str                   # <tag>/layer_XX
    about: str                 # one line: what each layer's value is (the chart's title)
    phase: str                 # which reading computes it: FORWARD, GRADIENTS, UPDATE or MOMENTS
    order: int                 # where its chart comes among the others (smaller first)
    extra: bool = False        # only with log.extra_signals
    per_head: bool = False     # a value per block and head: compute returns (blocks, heads)
    in_report: bool = False    # `normexp report` draws it over depth (step 0 and the end)
    profile_title: str = ""    # a panel of the depth-profile image under this title ("": none)
    log_scale: bool = True     # spans decades: plotted on a log axis

    def compute(self, reading):
        """A tensor of one value per block ((blocks, heads) when per_head), from the phase's reading."""
        raise NotImplementedError


LAYER_SIGNALS: dict[str, LayerSignal] = {}


def layer_signal(cls: type[LayerSignal]) -> type[LayerSignal]:
    """Class decorator: one instance of the signal registered under its tag."""
    if cls.tag in LAYER_SIGNALS:
        raise ValueError(f"per-layer signal {cls.tag!r} is registered twice")
    LAYER_SIGNALS[cls.tag] = cls()
    return cls


def signals(phase: str | None = None, extra: bool = True, per_head: bool | None = None) -> list[LayerSignal]:
    """The registered signals in chart order: those of `phase` (all phases by default), leaving
    out the extra ones unless `extra`, and only per-head (or per-block) ones when `per_head` says."""
    chosen = [s for s in LAYER_SIGNALS.values() if (phase is None or s.phase == phase) and (extra or not s.extra)
              and (per_head is None or s.per_head == per_head)]
    return sorted(chosen, key=lambda s: (s.order, s.tag))
