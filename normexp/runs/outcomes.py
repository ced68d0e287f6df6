"""What became of a finished run: learned, slow, stuck, collapsed, or diverged.

A run that does not end below the unigram baseline failed for one of two reasons, and only
one of them is a stability limit (REFERENCE.md, "Depth scaling"): the lr was too *low* for
the budget (the loss is still on its way down) or too *high* (the loss fell, then came back up,
blew up, or never left the unigram plateau). `classify` tells them apart from the run's status,
its level and the *shape* of its loss curve, with the unigram baseline b (summary.json's
baseline_loss; ℓ₀, the step-0 loss, for a run without one):

    diverged       status diverged: the divergence guard stopped it (a non-finite loss or
                   gradient, or a loss above its ceiling)
    learned        status completed: it ended at least `stall_margin` below b
                   (final val ≤ (1 − stall_margin)·b, runs.summary.beat_baseline)
    collapsed      it ended above that, but some loss of its trajectory before the end (a
                   logged train loss or a validation loss, not the last of either) got at
                   least `learned_margin` below b: min ℓ ≤ (1 − learned_margin)·b — it fell,
                   then rose. The last points are left out: a run still falling when the budget
                   ends can have one low last batch without having come back up (seen here:
                   Pre-LN, 16 blocks, lr 0.1, last train batch 5.6 % below b, final val 1.4 %
                   below b, every val point lower than the one before)
    slow           it never got `learned_margin` below b and is still falling at the end: the
                   least-squares slope of its last `SLOPE_POINTS` validation losses against the
                   step (scipy.stats.linregress) is negative beyond its noise (slope / standard
                   error below −t, the one-sided 95 % t quantile with n − 2 degrees of freedom)
                   and the fitted fall over those points is at least `FLAT_FALL`·b (validation
                   batches are fixed, so their noise can be tiny: a plateau creeping down by
                   0.1 % is not a run on its way). Too few steps for this lr, not unstable
    stuck          it never got going and is not falling: flat on the unigram plateau (or
                   rising). Post-LN's failure at a high lr; the boundary search does not call
                   it a stability limit without the budget check (boundary.py)
    never_learned  the name of slow and stuck together before the curve was read (old
                   summaries), and a run with fewer than 3 validation points, whose slope
                   cannot be told from its noise

`learned_margin` (configs/train.yaml `outcome.learned_margin`, 0.05) is larger than
`stall_margin` (0.02) because a logged train loss is one batch's loss: its noise around a
stalled run's plateau must not read as "it learned once". Unstable = collapsed or diverged;
slow, stuck and never_learned never got going (NOT_GOING).
"""

from __future__ import annotations

import math

from ..config.checks import is_number
from .schema import Status

LEARNED, COLLAPSED, DIVERGED = "learned", "collapsed", "diverged"
SLOW, STUCK = "slow", "stuck"
NEVER_LEARNED = "never_learned"          # slow or stuck, undecided (old summaries, too few val points)
OUTCOMES = (LEARNED, SLOW, STUCK, COLLAPSED, DIVERGED, NEVER_LEARNED)
UNSTABLE = (COLLAPSED, DIVERGED)         # fell then rose, or blew up: a stability limit
NOT_GOING = (SLOW, STUCK, NEVER_LEARNED)  # never got learned_margin below the baseline
TOO_SLOW = NOT_GOING                     # the old name of NOT_GOING
DEFAULT_LEARNED_MARGIN = 0.05            # configs/train.yaml outcome.learned_margin (the summary records it)
SLOPE_POINTS = 4                         # the last validation losses whose slope says "still falling"
FLAT_FALL = 0.005                        # ... and the least fall over them, as a fraction of b


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
    if is_number(reference) and best is not None and best <= (1 - learned_margin) * reference:
        return COLLAPSED
    return curve(summary, reference if is_number(reference) else None)


def curve(summary: dict, reference: float | None) -> str:
    """slow / stuck / never_learned for a run that never got going, from its last
    `SLOPE_POINTS` validation losses (see the module's rule)."""
    # step 0 is the untrained model (recorded since issue 58, as TensorBoard draws it): not the run's slope
    val = [p for p in ((summary.get("loss_trajectory") or {}).get("val") or [])
           if len(p) == 2 and is_number(p[0]) and is_number(p[1]) and p[0] > 0][-SLOPE_POINTS:]
    if len(val) < 3:  # two points have no noise estimate: a slope cannot be told from it
        return NEVER_LEARNED
    steps, losses = zip(*val)
    slope, stderr = least_squares_slope(steps, losses)
    fall = -slope * (steps[-1] - steps[0])
    t = t_quantile(len(val) - 2, 0.95)
    beyond_noise = slope < 0 and (stderr == 0 or slope / stderr < -t)
    scale = reference if reference is not None else abs(losses[-1])
    return SLOW if beyond_noise and fall >= FLAT_FALL * scale else STUCK


def t_cdf(t: float, df: int) -> float:
    """P(T ≤ t) for Student's t with a whole number `df` ≥ 1 of degrees of freedom, in closed form
    (Abramowitz & Stegun 26.7.3-4: with θ = atan(t/√df), P(|T| < t) is a finite sum of powers
    of cos θ, times sin θ, plus 2θ/π for odd df). Exact to rounding, and it needs no SciPy:
    every finishing run calls it (`curve`), also on a GPU image without SciPy."""
    theta = math.atan2(abs(t), math.sqrt(df))
    c2 = math.cos(theta) ** 2
    term, total = 1.0, 1.0
    if df % 2:  # odd: 2/π (θ + sin θ cos θ (1 + 2/3 cos²θ + 2·4/(3·5) cos⁴θ + ...)), df − 3 powers
        for k in range(2, df - 1, 2):
            term *= c2 * k / (k + 1)
            total += term
        inside = (2 / math.pi) * (theta + math.sin(theta) * math.cos(theta) * total) if df > 1 else 2 * theta / math.pi
    else:  # even: sin θ (1 + 1/2 cos²θ + 1·3/(2·4) cos⁴θ + ...), df − 2 powers
        for k in range(1, df - 2, 2):
            term *= c2 * k / (k + 1)
            total += term
        inside = math.sin(theta) * total
    return 0.5 + math.copysign(inside / 2, t)


def t_quantile(df: int, p: float) -> float:
    """The t with P(T ≤ t) = p (0.5 < p < 1), by bisection on `t_cdf` to the last bit."""
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:
        high *= 2
    for _ in range(200):
        middle = (low + high) / 2
        if middle in (low, high):
            break
        low, high = (middle, high) if t_cdf(middle, df) < p else (low, middle)
    return high


def least_squares_slope(xs, ys) -> tuple[float, float]:
    """The ordinary least-squares slope of ys on xs and its standard error, sqrt(SSE / (n - 2) / Sxx)
    (n ≥ 3 points, xs not all equal)."""
    n = len(xs)
    mean_x, mean_y = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / sxx
    sse = sum((y - mean_y - slope * (x - mean_x)) ** 2 for x, y in zip(xs, ys))
    return slope, math.sqrt(max(sse, 0.0) / (n - 2) / sxx)


def is_unstable(outcome: str | None) -> bool:
    return outcome in UNSTABLE


def not_going(outcome: str | None) -> bool:
    """slow, stuck or (old name) never_learned: it never got going."""
    return outcome in NOT_GOING
