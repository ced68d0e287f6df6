"""The loss-spike flag: Hampel's rule (a rolling median and k robust deviations) on the
logged train loss.

At a logging step with train loss ℓ, over the `window` logged losses before it:

    m = median(previous),  MAD = median(|previous − m|),
    s = max(1.4826·MAD, floor·|m|),   threshold = m + k·s

and ℓ is *above* the threshold when ℓ > threshold (no verdict until `min_points` losses are
logged). A spike is a run of consecutive logged losses above their thresholds; it counts
once, at its first step (its onset), so a loss that jumps and stays up for a few logging
steps is one spike, not one per step.

Why this rule (the Hampel identifier; Hampel 1974, Pearson 2002): the median and the MAD
ignore the spike itself and the few points around it, where a mean and a standard deviation
would be pulled up by them and hide it; a falling loss sits below the median of its past,
so the ordinary decline of training is never flagged; 1.4826·MAD estimates the standard
deviation of Gaussian noise, so k reads as "standard deviations of the batch-to-batch
noise". k = 5 (not the textbook 3) because one batch's loss has heavier tails than a
Gaussian, and a run logs hundreds of points. The window is short (10 logged points by
default) because the spread of a window that still holds the steep early decline is large and
hides spikes: in a default-shape run at log_every=10 the threshold 150 steps in was 3.9 (loss
2.5) over 20 points and 3.0 over 10. The floor (1 % of the median by default) keeps a
nearly flat loss, whose MAD is ~0, from flagging rounding noise. The settings are
configs/train.yaml's `loss_spike`.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

GAUSSIAN_MAD = 1.4826  # σ / MAD for Gaussian noise: makes 1.4826·MAD estimate the standard deviation


@dataclass(frozen=True)
class HampelSpikeRule:
    """See the module docstring; `window`, `k`, `floor`, `min_points` are train.yaml's loss_spike.*"""

    window: int
    k: float
    floor: float
    min_points: int

    def threshold(self, previous: Sequence[float]) -> float | None:
        """The loss above which the next logged loss is above the rule, given the logged losses
        before it (oldest first); None while fewer than min_points are there. Non-finite
        losses (a diverging run ends at them anyway) are left out."""
        past = [x for x in previous[-self.window:] if math.isfinite(x)]
        if len(past) < self.min_points:
            return None
        m = statistics.median(past)
        mad = statistics.median(abs(x - m) for x in past)
        return m + self.k * max(GAUSSIAN_MAD * mad, self.floor * abs(m))

    def above(self, previous: Sequence[float], loss: float) -> bool:
        t = self.threshold(previous)
        return t is not None and loss > t

    def check(self, losses: Sequence[float]) -> tuple[bool, float | None]:
        """For the last of the logged `losses` (oldest first): (whether it is a spike's onset,
        its threshold). An onset is above its threshold while the loss before it was not."""
        if not losses:
            return False, None
        *previous, loss = losses
        t = self.threshold(previous)
        onset = t is not None and loss > t and not (previous and self.above(previous[:-1], previous[-1]))
        return onset, t

    def onsets(self, losses: Sequence[float]) -> list[int]:
        """The indices of every spike's onset in a whole sequence of logged losses."""
        return [i for i in range(len(losses)) if self.check(losses[: i + 1])[0]]
