"""What became of a finished run: learned, never learned, collapsed, or diverged.

A run that does not end below the unigram baseline failed for one of two reasons, and only
one of them is a stability limit (REFERENCE.md, "Depth scaling"): the lr was too *low* for
the budget (the loss never got going) or too *high* (the loss fell, then came back up, or
blew up). `classify` tells them apart from the run's status and loss trajectory, with the
unigram baseline b (summary.json's baseline_loss; ℓ₀, the step-0 loss, for a run without one):

    diverged       status diverged: the divergence guard stopped it (a non-finite loss or
                   gradient, or a loss above its ceiling)
    learned        status completed: it ended at least `stall_margin` below b
                   (final val ≤ (1 − stall_margin)·b, runfolder.beat_baseline)
    collapsed      it ended above that, but some loss of its trajectory before the end (a
                   logged train loss or a validation loss, not the last of either) got at
                   least `learned_margin` below b: min ℓ ≤ (1 − learned_margin)·b — it
                   learned, then lost it. The last points are left out: a run still falling
                   when the budget ends can have one low last batch without having come back
                   up (seen here: Pre-LN, 16 blocks, lr 0.1, last train batch 5.6 % below b,
                   final val 1.4 % below b, every val point lower than the one before)
    never_learned  it ended above that and no point of its trajectory got `learned_margin`
                   below b: it never got going. Alone this does not say why: too low an lr
                   for the budget, or a run stuck on the unigram plateau (Post-LN's failure at
                   a high lr). The boundary search decides by position: below an lr that
                   learned it is "too slow", above one it is "stalled" (an upper edge)

`learned_margin` (configs/train.yaml `outcome.learned_margin`, 0.05) is larger than
`stall_margin` (0.02) because a logged train loss is one batch's loss: its noise around a
stalled run's plateau must not read as "it learned once". Unstable = collapsed or diverged
(the upper edge of the learning window); never_learned below a learning lr is the lower
edge's failure.
"""

from __future__ import annotations

from ..config.checks import is_number
from .schema import Status

LEARNED, NEVER_LEARNED, COLLAPSED, DIVERGED = "learned", "never_learned", "collapsed", "diverged"
OUTCOMES = (LEARNED, NEVER_LEARNED, COLLAPSED, DIVERGED)
UNSTABLE = (COLLAPSED, DIVERGED)         # failures above the learning window: a stability limit
TOO_SLOW = (NEVER_LEARNED,)              # below a learning lr: too slow for the budget (see above)
DEFAULT_LEARNED_MARGIN = 0.05            # configs/train.yaml outcome.learned_margin (the summary records it)


def lowest_loss(summary: dict) -> float | None:
    """The lowest finite loss a run reached before its end: its trajectory's train and val
    points (summary.json's loss_trajectory) but the last of each, and its best validation loss
    when that is below the final one (an earlier evaluation)."""
    trajectory = summary.get("loss_trajectory") or {}
    values = [p[1] for part in ("train", "val") for p in (trajectory.get(part) or [])[:-1] if len(p) == 2]
    best, final = summary.get("best_val_loss"), summary.get("final_val_loss")
    if is_number(best) and not (is_number(final) and best >= final):
        values.append(best)
    values = [v for v in values if is_number(v)]
    return min(values) if values else None


def classify(summary: dict, learned_margin: float | None = None) -> str | None:
    """The outcome of a finished run's summary (see the module's rule); None for a run that
    has not finished (running, failed, interrupted: no outcome). `learned_margin` defaults to
    the one the run recorded, else DEFAULT_LEARNED_MARGIN."""
    status = summary.get("status")
    if status == Status.DIVERGED:
        return DIVERGED
    if status == Status.COMPLETED:
        return LEARNED
    if status != Status.STALLED:
        return None
    if learned_margin is None:
        learned_margin = summary.get("learned_margin")
    if not is_number(learned_margin):
        learned_margin = DEFAULT_LEARNED_MARGIN
    reference = summary.get("baseline_loss")
    if not is_number(reference):
        reference = summary.get("initial_loss")
    best = lowest_loss(summary)
    if not is_number(reference) or best is None:
        return NEVER_LEARNED
    return COLLAPSED if best <= (1 - learned_margin) * reference else NEVER_LEARNED


def is_unstable(outcome: str | None) -> bool:
    return outcome in UNSTABLE
