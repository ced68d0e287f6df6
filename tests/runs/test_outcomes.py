"""The outcome classes (normexp/runs/outcomes.py) on synthetic loss trajectories, against the rule
worked out by hand: baseline b = 3.0, stall_margin 0.02 (learned ends ≤ 2.94), learned_margin
0.05 (got going: some loss ≤ 2.85)."""

import math

import pytest

from normexp.runs import outcomes
from normexp.runs.outcomes import COLLAPSED, DIVERGED, LEARNED, NEVER_LEARNED

B = 3.0


def summary(status, train, val, baseline=B, initial=5.0, learned_margin=0.05):
    """A summary.json as training writes it, with the trajectory's points at steps 0, 20, ..."""
    return {"status": status, "baseline_loss": baseline, "initial_loss": initial, "stall_margin": 0.02,
            "learned_margin": learned_margin,
            "loss_trajectory": {"train": [[20 * i, v] for i, v in enumerate(train)],
                                "val": [[50 * (i + 1), v] for i, v in enumerate(val)]},
            "final_val_loss": val[-1] if val else None, "best_val_loss": min(val) if val else None}


def test_learned_run():
    # falls from 5.0 to 2.2, ends at 2.3 <= 2.94: completed
    assert outcomes.classify(summary("completed", [5.0, 4.0, 3.0, 2.5, 2.2], [2.8, 2.3])) == LEARNED


def test_never_learned_run_sits_on_the_baseline():
    # falls from ℓ₀ to the unigram plateau and wobbles there by ±2 % (one batch's noise):
    # lowest 2.90 > 2.85, so it never got going
    s = summary("stalled", [5.0, 3.4, 3.05, 2.95, 3.06, 2.90, 3.02], [3.01, 2.99])
    assert outcomes.lowest_loss(s) == pytest.approx(2.90)
    assert outcomes.classify(s) == NEVER_LEARNED


def test_collapsed_run_learned_then_came_back_up():
    # train loss reached 2.6 (13 % below b), the run ended at 3.1 (above b)
    s = summary("stalled", [5.0, 3.5, 2.9, 2.6, 3.2, 3.3], [2.8, 3.1])
    assert outcomes.classify(s) == COLLAPSED


def test_a_run_still_falling_at_the_end_did_not_collapse():
    # val falls at every evaluation and ends at 2.98 (> 2.94: stalled); only the last train
    # batch, 2.84, is below 2.85. Nothing came back up: it never got going in the budget
    s = summary("stalled", [5.0, 3.2, 3.1, 2.84], [3.05, 2.98])
    assert outcomes.lowest_loss(s) == pytest.approx(3.05)
    assert outcomes.classify(s) == NEVER_LEARNED


def test_collapse_seen_only_in_the_validation_points():
    s = summary("stalled", [5.0, 3.3, 3.2], [2.7, 3.2])  # val 2.7 <= 2.85, train never below
    assert outcomes.classify(s) == COLLAPSED


def test_diverged_whatever_the_trajectory():
    s = summary("diverged", [5.0, 2.5, math.nan], [2.6])
    assert outcomes.classify(s) == DIVERGED
    assert outcomes.is_unstable(outcomes.classify(s)) and not outcomes.is_unstable(NEVER_LEARNED)


def test_the_margin_decides_at_its_edge():
    # lowest loss 2.88: 4 % below b. Got going under a 3 % margin, not under 5 %
    s = summary("stalled", [5.0, 2.88, 3.1], [3.05])
    assert outcomes.classify(s, learned_margin=0.05) == NEVER_LEARNED
    assert outcomes.classify(s, learned_margin=0.03) == COLLAPSED
    s["learned_margin"] = 0.03  # the margin the run recorded is the default
    assert outcomes.classify(s) == COLLAPSED


def test_without_a_trajectory_best_val_decides():
    # an old summary: no loss_trajectory, only final and best validation loss
    s = {"status": "stalled", "baseline_loss": B, "final_val_loss": 3.1, "best_val_loss": 2.5}
    assert outcomes.classify(s) == COLLAPSED
    s["best_val_loss"] = 3.0
    assert outcomes.classify(s) == NEVER_LEARNED


def test_without_a_baseline_the_initial_loss_is_the_reference():
    s = summary("stalled", [5.0, 4.9, 4.8], [4.9], baseline=None, initial=5.0)  # 4.8 > 4.75
    assert outcomes.classify(s) == NEVER_LEARNED
    s = summary("stalled", [5.0, 4.0, 4.9], [4.95], baseline=None, initial=5.0)
    assert outcomes.classify(s) == COLLAPSED


@pytest.mark.parametrize("status", ["running", "failed", "interrupted", "requeued", None])
def test_unfinished_runs_have_no_outcome(status):
    assert outcomes.classify(summary(status, [5.0, 2.0], [2.0])) is None
