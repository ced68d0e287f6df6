"""Learning-rate schedules: linear warmup over `warmup` steps, then a named decay.

Each schedule maps (step, cfg) to a multiplier of the peak lr; step counts optimizer
updates already done (0 for the first update).
"""

from __future__ import annotations

import math

SCHEDULES = {}


def schedule(name):
    def add(fn):
        SCHEDULES[name] = fn
        return fn
    return add


@schedule("constant")
def constant(progress: float, step: int, warmup: int, sched) -> float:
    return 1.0


@schedule("cosine")
def cosine(progress: float, step: int, warmup: int, sched) -> float:
    floor = sched.min_lr_ratio  # configs/schedule/cosine.yaml
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))


@schedule("linear")
def linear(progress: float, step: int, warmup: int, sched) -> float:
    floor = sched.min_lr_ratio  # configs/schedule/linear.yaml
    return floor + (1 - floor) * (1 - progress)


@schedule("inverse_sqrt")
def inverse_sqrt(progress: float, step: int, warmup: int, sched) -> float:
    """Vaswani et al. 2017: lr·sqrt(warmup/step) after warmup; lr/sqrt(step+1) without warmup."""
    start = max(warmup, 1)
    return math.sqrt(start / max(step + 1, start))


def lr_multiplier(step: int, steps: int, warmup: int, sched) -> float:
    """Linear warmup from lr/warmup up to lr over the first `warmup` updates, then decay."""
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - warmup - 1) if steps - warmup > 1 else 1.0
    return SCHEDULES[sched.name](min(progress, 1.0), step, warmup, sched)
