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


# ------------------------------------------------ slow or stuck: the curve's last evaluations

def curve_summary(val, train=None):
    """A stalled run whose train loss never got 5 % below b (lowest 2.90 > 2.85), val every 50 steps."""
    return summary("stalled", train or [5.0, 3.6, 3.3, 3.1, 2.95], val)


def test_a_curve_still_falling_above_the_threshold_is_slow():
    # val 3.40, 3.30, 3.18, 3.05: it falls 0.35 over 150 steps, by 0.10–0.13 each time (the
    # slope -0.00234/step is 24 standard errors below 0, beyond t(0.95, 2) = 2.92), and ends
    # above 2.94: not learned, still on its way. Too few steps, never unstable
    s = curve_summary([3.40, 3.30, 3.18, 3.05])
    assert outcomes.classify(s) == outcomes.SLOW
    assert not outcomes.is_unstable(outcomes.SLOW) and outcomes.not_going(outcomes.SLOW)


def test_a_flat_noisy_curve_on_the_plateau_is_stuck():
    # val 3.02, 2.99, 3.03, 3.00 around b = 3.0: the slope (-0.00004/step) is 0.2 of its
    # standard error (0.0002): flat on the unigram plateau
    assert outcomes.classify(curve_summary([3.02, 2.99, 3.03, 3.00])) == outcomes.STUCK
    # rising from the plateau without ever getting 5 % below b: not falling, stuck
    assert outcomes.classify(curve_summary([2.99, 3.00, 3.02, 3.05])) == outcomes.STUCK


def test_a_creep_smaller_than_the_flat_fall_is_stuck_and_a_large_noisy_fall_is_not_enough():
    # exactly linear (no noise), but 0.006 over the last four evaluations < 0.5 % of b = 0.015
    assert outcomes.classify(curve_summary([3.010, 3.008, 3.006, 3.004])) == outcomes.STUCK
    # the same shape 4× steeper: 0.024 ≥ 0.015, and exactly linear: slow
    assert outcomes.classify(curve_summary([3.040, 3.032, 3.024, 3.016])) == outcomes.SLOW
    # down 0.03 along the fitted line, zig-zagging by ±0.1: slope/stderr = -0.2 > -t(0.95, 2) = -2.92
    assert outcomes.classify(curve_summary([3.15, 3.00, 3.20, 3.05])) == outcomes.STUCK


def test_only_the_last_evaluations_count():
    # fell fast early (3.9 -> 3.2), then flat for the last four: stuck, not slow
    assert outcomes.classify(curve_summary([3.9, 3.5, 3.2, 3.01, 3.03, 3.00, 3.02])) == outcomes.STUCK
    # flat early, falling steadily over the last four: slow
    assert outcomes.classify(curve_summary([3.3, 3.3, 3.3, 3.25, 3.17, 3.10, 3.02])) == outcomes.SLOW


def test_fell_then_rose_is_collapsed_and_guard_is_diverged_whatever_the_curve():
    s = summary("stalled", [5.0, 3.0, 2.6, 2.8, 3.1], [2.7, 2.9, 3.05, 3.2])
    assert outcomes.classify(s) == COLLAPSED
    assert outcomes.classify(summary("diverged", [5.0, 3.5], [3.40, 3.30, 3.18, 3.05])) == DIVERGED


def test_two_evaluations_cannot_tell_slow_from_stuck_and_keep_the_old_name():
    # a line through two points has no noise estimate: never_learned, as before the curve was read
    assert outcomes.classify(curve_summary([3.30, 3.05])) == NEVER_LEARNED
    assert outcomes.not_going(NEVER_LEARNED) and NEVER_LEARNED in outcomes.OUTCOMES


def test_the_initial_models_val_point_is_not_the_runs_slope():
    """summary.json's val trajectory starts at step 0 (the untrained model, ~ln 256 = 5.5) since
    issue 58. A run on the plateau with two evaluations after it: still never_learned (two points
    have no slope), and its lowest loss is unchanged; with step 0 counted it would read "slow"."""
    s = summary("stalled", [5.0, 3.4, 3.05, 2.95, 3.06, 2.90, 3.02], [3.01, 2.99])
    s["loss_trajectory"]["val"].insert(0, [0, 5.5])
    assert outcomes.lowest_loss(s) == pytest.approx(2.90)
    assert outcomes.classify(s) == NEVER_LEARNED


def test_the_slope_and_its_standard_error_are_scipys_linregress():
    """outcomes.curve fits its slope without scipy.stats (1.5 s to import in every run): the same
    slope and standard error as scipy's linregress, on noisy and on exact lines."""
    import random

    from scipy import stats

    from normexp.runs.outcomes import least_squares_slope

    rng = random.Random(3)
    for n in (3, 4, 7, 12):
        xs = [25 * (i + 1) for i in range(n)]
        for ys in ([4.0 - 1e-3 * x + rng.gauss(0, 0.02) for x in xs], [2.5 + 0.0 * x for x in xs],
                   [3.0 - 2e-4 * x for x in xs]):
            slope, stderr = least_squares_slope(xs, ys)
            fit = stats.linregress(xs, ys)
            assert slope == pytest.approx(fit.slope, rel=1e-9, abs=1e-15)
            if math.isnan(fit.stderr):  # a flat line: scipy's r is 0/0; no scatter about it, so 0
                assert (slope, stderr) == (0.0, 0.0)
            else:
                assert stderr == pytest.approx(fit.stderr, rel=1e-6, abs=1e-12)


def test_the_t_quantile_of_the_curve_rule_is_scipys_without_scipy():
    """outcomes.t_quantile (closed-form CDF, bisection) against SciPy's Student t, the reference:
    every df the rule can meet (3 to SLOPE_POINTS points: df 1..) and the tails around it."""
    from scipy.special import stdtr, stdtrit

    for df in range(1, 61):
        for p in (0.6, 0.9, 0.95, 0.975, 0.999):
            assert math.isclose(outcomes.t_quantile(df, p), stdtrit(df, p), rel_tol=1e-12, abs_tol=0), (df, p)
        for t in (-7.5, -1.3, 0.0, 0.4, 2.0, 30.0):
            assert math.isclose(outcomes.t_cdf(t, df), stdtr(df, t), rel_tol=1e-12, abs_tol=1e-15), (df, t)
