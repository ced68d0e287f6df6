"""The statistics of issue 39 against simulated data with a known truth: the t-interval from
scipy's t, the LR sensitivity's t-interval over seeds, the depth law's interval-censored
likelihood fit (every seed at every depth) and the optimal lr with its slope."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from normexp.analysis import depth_law, study


# ------------------------------------------------------------------ means and sensitivity

def test_the_t_interval_is_scipys_t_on_three_numbers_by_hand():
    x = [2.59, 2.73, 2.61]
    mean = sum(x) / 3
    sd = math.sqrt(sum((v - mean) ** 2 for v in x) / 2)
    half = stats.t.ppf(0.975, 2) * sd / math.sqrt(3)
    assert study.t_interval(x) == pytest.approx((mean, mean - half, mean + half), abs=1e-12)
    assert study.t975(2) == pytest.approx(4.302652729911275, abs=1e-9)   # no hand table: scipy's quantile
    assert study.t975(57) == pytest.approx(stats.t.ppf(0.975, 57), abs=1e-12)


def test_lr_sensitivity_t_interval_over_seeds_by_hand():
    # 3 lrs × 3 seeds; the mean curve is best at the middle lr
    grid = {1e-3: {0: 3.0, 1: 3.2, 2: 3.1}, 1e-2: {0: 2.6, 1: 2.9, 2: 2.7}, 1e-1: {0: 3.3, 1: 3.3, 2: 3.6}}
    point, low, high = study.seed_sensitivity(list(grid.values()))
    d = [np.mean([grid[lr][k] for lr in grid]) - grid[1e-2][k] for k in range(3)]   # seed k's share
    mean, sd = np.mean(d), np.std(d, ddof=1)
    half = stats.t.ppf(0.975, 2) * sd / math.sqrt(3)
    assert (point, low, high) == pytest.approx((mean, mean - half, mean + half), abs=1e-12)
    means = [np.mean(list(g.values())) for g in grid.values()]
    assert point == pytest.approx(np.mean([m - min(means) for m in means]), abs=1e-12)  # the sensitivity itself
    # a seed missing at one lr is left out of the interval (its curve is incomplete)
    grid[1e-1].pop(2)
    assert study.seed_sensitivity(list(grid.values()))[0] == pytest.approx(np.mean(d[:2]), abs=1e-12)


# ------------------------------------------------------------------ the depth law's likelihood fit

def simulate_points(rng, slope, sigma, depths=(2, 4, 8, 16, 32, 64), seeds=3, grid_ratio=2.0, offset=0.0):
    """Seed k at depth L learns iff log lr ≤ μ(L) + σε; runs on a ×grid_ratio lr grid around the limit."""
    rows = []
    grid = 1e-4 * grid_ratio ** np.arange(int(math.log(1e4) / math.log(grid_ratio)) + 1)
    for depth in depths:
        mu = math.log(0.01) + offset + slope * math.log(depth / 2)
        limits = mu + sigma * rng.standard_normal(seeds)
        for k in range(seeds):
            rows += [{"layers": depth, "lr": float(lr), "seed": k, "learned": "yes" if math.log(lr) <= limits[k] else "no"}
                     for lr in grid]
    return pd.DataFrame(rows)


def test_upper_side_by_hand():
    pts = pd.DataFrame([
        # depth 4: seed 0 learns at 1e-3 and 2e-3, fails at 4e-3; seed 1 fails from 2e-3; seed 2 learns everywhere
        *({"layers": 4, "lr": lr, "seed": 0, "learned": ok} for lr, ok in ((1e-4, "no"), (1e-3, "yes"), (2e-3, "yes"), (4e-3, "no"))),
        *({"layers": 4, "lr": lr, "seed": 1, "learned": ok} for lr, ok in ((1e-4, "no"), (1e-3, "yes"), (2e-3, "no"), (4e-3, "no"))),
        *({"layers": 4, "lr": lr, "seed": 2, "learned": ok} for lr, ok in ((1e-4, "no"), (1e-3, "yes"), (2e-3, "yes"), (4e-3, "yes"))),
        # depth 8: nothing learned: left out, neither edge known
        *({"layers": 8, "lr": lr, "seed": 0, "learned": "no"} for lr in (1e-4, 1e-3))])
    lows, highs, z, dropped = depth_law.upper_side(pts)
    assert dropped == [8]
    # 1e-4 is below the window's start (too slow there), so it never enters
    assert np.exp(lows) == pytest.approx([2e-3, 1e-3, 4e-3])
    assert np.exp(highs[:2]) == pytest.approx([4e-3, 2e-3]) and highs[2] == math.inf   # seed 2: ≥ the bound
    assert z == pytest.approx([math.log(4)] * 3)


def test_the_likelihood_fit_recovers_a_known_slope_on_a_large_sample():
    rng = np.random.default_rng(3)
    pts = simulate_points(rng, slope=-0.5, sigma=0.3, seeds=60, grid_ratio=1.2)
    lows, highs, z, _ = depth_law.upper_side(pts)
    fit = depth_law.likelihood_fit(lows, highs, z, at_depths=[2, 1000])
    assert fit["slope_low"] < -0.5 < fit["slope_high"]
    assert fit["slope_high"] - fit["slope_low"] < 0.15            # 360 seed limits: a tight interval
    assert fit["slope"] == pytest.approx(-0.5, abs=0.07)
    assert fit["width"] == pytest.approx(0.3, abs=0.06)           # σ: the seeds' scatter
    limit, low, high = fit["limits"][2]
    assert low < 0.01 < high and limit == pytest.approx(0.01, rel=0.1)
    far, far_low, far_high = fit["limits"][1000]
    truth = 0.01 * 500 ** -0.5
    assert far_low < truth < far_high and far_low < far < far_high


def test_the_likelihood_interval_covers_on_small_studies():
    """20 small studies (3 seeds, ×2 grid): a 95 % interval misses about 1; 5 misses or more has
    probability < 0.3 % at true 95 % coverage (the full measurement: scripts/coverage.py)."""
    rng = np.random.default_rng(11)
    misses = 0
    for _ in range(20):
        pts = simulate_points(rng, slope=-0.7, sigma=0.25, offset=rng.uniform(-0.5, 0.5))
        misses += not depth_law.slope_inside(*depth_law.upper_side(pts)[:3], -0.7)
    assert misses <= 4


def test_counting_runs_as_independent_would_be_overconfident():
    """One seed seen at more lrs tells the same limit: the interval must not shrink when the
    same seeds are probed at more lrs above their limits."""
    rng = np.random.default_rng(5)
    coarse = simulate_points(rng, slope=-0.5, sigma=0.3, grid_ratio=2.0)
    more = coarse.copy()
    extra = more[more["learned"] == "no"].copy()
    extra["lr"] = extra["lr"] * 1.5          # another failing lr above each failure: no new information
    both = pd.concat([more, extra], ignore_index=True)
    a = depth_law.likelihood_fit(*depth_law.upper_side(coarse)[:3])
    b = depth_law.likelihood_fit(*depth_law.upper_side(both)[:3])
    assert (b["slope_low"], b["slope_high"]) == pytest.approx((a["slope_low"], a["slope_high"]), abs=1e-3)


def test_one_depth_or_no_failure_gives_no_fit():
    rng = np.random.default_rng(0)
    one = simulate_points(rng, -0.5, 0.3, depths=(8,))
    assert math.isnan(depth_law.likelihood_fit(*depth_law.upper_side(one)[:3])["slope"])
    learned_everywhere = one.assign(learned="yes", layers=[2, 4] * (len(one) // 2))
    assert math.isnan(depth_law.likelihood_fit(*depth_law.upper_side(learned_everywhere)[:3])["slope"])



def seed_intervals(centres, depths, seeds, sigma, rng, step=0.02):
    """(lows, highs, log depths): each seed's limit (its depth's centre + σε) located to the
    ×e^step grid cell that holds it, as upper_side gives a seed probed at every grid lr."""
    lows, highs, z = [], [], []
    for depth, centre in zip(depths, centres):
        limits = centre + sigma * rng.standard_normal(seeds)
        low = np.floor(limits / step) * step
        lows += list(low)
        highs += list(low + step)
        z += [math.log(depth)] * seeds
    return lows, highs, z


def test_with_many_seeds_the_scatter_fit_is_least_squares_through_the_depths_with_its_t_interval():
    """60 seeds a depth locate each depth's centre almost exactly; the depths scatter about the
    law by τ = 0.3. Then the slope is the least-squares slope through the centres and its interval
    is the textbook t-interval (J − 2 degrees of freedom): the independent expectation. Without
    the depth term the interval would be far narrower (the seeds alone pin every centre)."""
    rng = np.random.default_rng(4)
    depths = np.array([2, 4, 8, 16, 32])
    centres = math.log(0.02) - 0.7 * np.log(depths / 2) + 0.3 * rng.standard_normal(len(depths))
    lows, highs, z = seed_intervals(centres, depths, seeds=60, sigma=0.1, rng=rng)
    fit = depth_law.likelihood_fit(lows, highs, z)
    r = stats.linregress(np.log(depths), centres)
    half = stats.t.ppf(0.975, len(depths) - 2) * r.stderr
    assert fit["slope"] == pytest.approx(r.slope, abs=0.01)
    assert (fit["slope_low"], fit["slope_high"]) == pytest.approx((r.slope - half, r.slope + half), abs=0.03)
    residual = centres - (r.intercept + r.slope * np.log(depths))
    assert fit["depth_scatter"] == pytest.approx(math.sqrt(np.mean(residual ** 2)), rel=0.1)  # τ's ML estimate
    assert fit["width"] == pytest.approx(0.1, abs=0.015)
    seeds_only = depth_law.likelihood_fit(lows, highs, z, scatter=False)
    assert seeds_only["slope_high"] - seeds_only["slope_low"] < (fit["slope_high"] - fit["slope_low"]) / 5


def test_depths_on_the_law_give_no_depth_scatter_and_the_seeds_only_slope():
    """Depth centres exactly on the law: τ̂ is (nearly) 0 and the slope is the seeds-only fit's."""
    rng = np.random.default_rng(8)
    depths = [2, 4, 8, 16]
    centres = [math.log(0.02) - 0.7 * math.log(d / 2) for d in depths]
    lows, highs, z = seed_intervals(centres, depths, seeds=40, sigma=0.2, rng=rng, step=0.1)
    fit = depth_law.likelihood_fit(lows, highs, z)
    seeds_only = depth_law.likelihood_fit(lows, highs, z, scatter=False)
    assert fit["depth_scatter"] < 0.05
    assert fit["slope"] == pytest.approx(seeds_only["slope"], abs=0.01)
    assert fit["slope"] == pytest.approx(-0.7, abs=0.1)
    assert fit["slope_low"] < -0.7 < fit["slope_high"]


def test_the_threshold_is_the_t_tests_and_chi2_in_the_limit():
    for depths in (3, 4, 6):
        t = stats.t.ppf(0.975, depths - 2)
        assert depth_law.drop_threshold(depths) == pytest.approx(depths * math.log(1 + t * t / (depths - 2)))
    assert depth_law.drop_threshold(3) == pytest.approx(15.27, abs=0.01)
    assert depth_law.drop_threshold(10 ** 6) == pytest.approx(depth_law.CHI2_95, abs=1e-4)
    assert depth_law.drop_threshold(2) == math.inf and depth_law.drop_threshold(4, coefficients=4) == math.inf


def test_the_slope_interval_covers_when_three_depths_scatter():
    """30 studies of 3 depths (2, 4, 8), 3 seeds, ×2 grid, depths scattered about the law by
    τ = 0.4: the interval with the depth term misses about 1.5 at 95 %; ≥ 6 misses has
    probability < 1 % at 95 % coverage. Without the depth term it misses about half."""
    rng = np.random.default_rng(21)
    misses = {True: 0, False: 0}
    for _ in range(30):
        centres = math.log(0.02) + rng.uniform(-0.5, 0.5) - 0.7 * np.log(np.array([1, 2, 4])) + 0.4 * rng.standard_normal(3)
        lows, highs, z = seed_intervals(centres, [2, 4, 8], seeds=3, sigma=0.2, rng=rng, step=math.log(2))
        for scatter in misses:
            misses[scatter] += not depth_law.slope_inside(lows, highs, z, -0.7, scatter=scatter)
    assert misses[True] <= 5
    assert misses[False] >= 8       # the check has teeth: the seeds-only interval does miss here


def test_slope_inside_is_the_interval_it_inverts():
    rng = np.random.default_rng(6)
    centres = math.log(0.02) - 0.7 * np.log(np.array([1, 2, 4, 8])) + 0.2 * rng.standard_normal(4)
    lows, highs, z = seed_intervals(centres, [2, 4, 8, 16], seeds=3, sigma=0.2, rng=rng, step=math.log(1.25))
    fit = depth_law.likelihood_fit(lows, highs, z)
    for s in (fit["slope_low"] - 0.02, fit["slope_low"] + 0.02, fit["slope"], fit["slope_high"] - 0.02,
              fit["slope_high"] + 0.02):
        assert depth_law.slope_inside(lows, highs, z, s) == (fit["slope_low"] <= s <= fit["slope_high"])


def test_the_slope_difference_of_two_lines():
    """Two lines with many seeds and depths on their laws (slopes −1.0 and −0.4): the difference
    is 0.6, its interval holds it, and it is the difference of the lines' own fits."""
    rng = np.random.default_rng(9)
    depths = [2, 4, 8, 16]
    lines = []
    for slope in (-1.0, -0.4):
        centres = [math.log(0.02) + slope * math.log(d / 2) for d in depths]
        lines.append(seed_intervals(centres, depths, seeds=30, sigma=0.2, rng=rng, step=0.1))
    diff = depth_law.slope_difference(*lines)
    own = [depth_law.likelihood_fit(*line, intervals=False)["slope"] for line in lines]
    assert diff["difference"] == pytest.approx(own[1] - own[0], abs=0.02)
    assert diff["low"] < 0.6 < diff["high"] and diff["high"] - diff["low"] < 0.5
    assert diff["depths"] == (4, 4)
    two = [tuple(v[:60] for v in line) for line in lines]        # 2 depths each: no degree of freedom left
    assert depth_law.slope_difference(*two)["low"] == -math.inf

# ------------------------------------------------------------------ the optimal lr

def parabola_cells(x_star, lrs, seeds=3, noise=0.0, rng=None, curvature=0.1):
    return {lr: [2.6 + curvature * (math.log(lr) - x_star) ** 2 + (noise * rng.standard_normal() if noise else 0.0)
                 for _ in range(seeds)] for lr in lrs}


def test_the_optimum_of_a_noiseless_parabola_is_its_vertex():
    lrs = list(3e-4 * 2.4 ** np.arange(6))
    x_star = math.log(2.2e-3)
    o = depth_law.optimum(parabola_cells(x_star, lrs))
    assert o["kind"] == "optimum" and o["lr"] == pytest.approx(2.2e-3, rel=1e-9)
    # no seed spread: only the best lr can be the best, and the interval is one lr step either side
    assert (o["low"], o["high"]) == (lrs[1], lrs[3]) and lrs[1] < 2.2e-3 < lrs[3]
    one_seed = depth_law.optimum(parabola_cells(x_star, lrs, seeds=1))
    assert math.isnan(one_seed["low"]) and one_seed["lr"] == pytest.approx(2.2e-3)   # one seed: no spread known
    edge = depth_law.optimum(parabola_cells(math.log(1e-4), lrs))
    assert edge["kind"] == "≤" and edge["best_grid_lr"] == lrs[0] and math.isnan(edge["lr"])
    assert depth_law.optimum(parabola_cells(math.log(1.0), lrs))["kind"] == "≥"


def test_which_lrs_could_be_the_best_by_hand():
    """Three lrs, two seeds each, every lr's seeds 1 apart: pooled σ² = 0.5 (df 3). An lr is dropped
    when its mean exceeds another's by more than t·σ·√(1/2 + 1/2), t Student's one-sided quantile
    at 0.05/2 (Bonferroni over the 2 comparisons with the best) with 3 df: 3.18·0.71 = 2.25."""
    margin = stats.t.ppf(1 - 0.05 / 2, 3) * math.sqrt(0.5)
    for gap, kept in ((margin - 0.01, True), (margin + 0.01, False)):
        vals = [np.array([1.0, 2.0]), np.array([0.0, 1.0]), np.array([gap, gap + 1.0])]   # means 1.5, 0.5, 0.5 + gap
        assert list(depth_law.could_be_best(vals)) == [True, True, kept]
    assert depth_law.could_be_best([np.array([1.0]), np.array([2.0])]) is None     # no spread known


def test_the_optimum_interval_covers_where_the_loss_rises_steeper_on_one_side():
    """The case that broke the parabola's parametric bootstrap (it covered 0.725 in the methods
    page's simulation): the loss rises 3× more steeply above the optimum than below."""
    rng = np.random.default_rng(7)
    lrs = 1e-4 * 2.4 ** np.arange(9)
    hits, n = 0, 60
    for _ in range(n):
        x_star = math.log(2e-3) + rng.uniform(-0.5, 0.5)
        d = np.log(lrs) - x_star
        curve = 2.6 + 0.1 * d ** 2 * np.where(d > 0, 3.0, 1.0)
        o = depth_law.optimum({lr: list(c + 0.08 * rng.standard_normal(3)) for lr, c in zip(lrs, curve)})
        hits += o["low"] <= math.exp(x_star) <= o["high"]
    assert hits >= 52   # ≥ 87 %: at 95 % coverage fewer has probability < 1 %; the old parametric bootstrap covered 39 of these 60


def test_the_optimum_interval_covers_a_known_optimum():
    rng = np.random.default_rng(7)
    lrs = list(1e-4 * 2.4 ** np.arange(8))
    hits, n = 0, 40
    for i in range(n):
        x_star = math.log(2e-3) + rng.uniform(-0.5, 0.5)
        o = depth_law.optimum(parabola_cells(x_star, lrs, noise=0.08, rng=rng))
        hits += o["low"] <= math.exp(x_star) <= o["high"]
    assert hits >= 33   # ≥ 83 %: at true 95 % coverage, fewer has probability < 0.5 %


def test_the_optimum_slope_and_its_t_interval():
    depths = [2, 4, 8, 16, 32, 64]
    exact = [3e-3 * (d / 2) ** -0.3 for d in depths]
    s, low, high = depth_law.optimum_slope(depths, exact)
    assert s == pytest.approx(-0.3, abs=1e-12) and high - low == pytest.approx(0, abs=1e-9)
    noisy = [v * math.exp(e) for v, e in zip(exact, (0.1, -0.2, 0.05, 0.15, -0.1, 0.0))]
    r = stats.linregress(np.log(depths), np.log(noisy))
    half = stats.t.ppf(0.975, 4) * r.stderr
    assert depth_law.optimum_slope(depths, noisy) == pytest.approx((r.slope, r.slope - half, r.slope + half))
    assert all(map(math.isnan, depth_law.optimum_slope(depths[:2], exact[:2])))


# ------------------------------------------------------------------ the report section

def test_the_depth_law_section_writes_the_likelihood_and_optimum_columns(tmp_path):
    from normexp.analysis.boundary import RESULT_COLUMNS
    from normexp.analysis.report.sections import depth_law_section

    rng = np.random.default_rng(2)
    pts = simulate_points(rng, slope=-0.5, sigma=0.2, seeds=3)
    pts.insert(0, "placement", "pre")
    # each run's loss: a parabola around an optimum ×3 below the limit, slope −0.3, a little seed noise
    opt = {d: math.log(0.01 / 3) - 0.3 * math.log(d / 2) for d in pts["layers"].unique()}
    pts["loss"] = [2.6 + 0.1 * (math.log(r["lr"]) - opt[r["layers"]]) ** 2 + 0.01 * rng.standard_normal()
                   for r in pts.to_dict("records")]
    folder = tmp_path / "sweep"
    folder.mkdir()
    rows = []
    for d, g in pts.groupby("layers"):
        stable = g.groupby("lr")["learned"].apply(lambda v: (v == "yes").all())
        last = max(lr for lr, ok in stable.items() if ok)
        first = min(lr for lr, ok in stable.items() if not ok and lr > last)
        rows.append({"placement": "pre", "layers": d, **{c: "" for c in RESULT_COLUMNS}, "key": "lr",
                     "last_stable": last, "first_unstable": first, "upper_edge": "unstable"})
    pd.DataFrame(rows).to_csv(folder / "boundary.csv", index=False)
    pts.to_csv(folder / "boundary_points.csv", index=False)
    lines = depth_law_section([folder / "boundary.csv"], tmp_path, lambda *_: None)
    got = pd.read_csv(tmp_path / "depth_law_slopes.csv").iloc[0]
    low, high = (float(v) for v in got["slope, likelihood [95 %]"].split("[")[1].rstrip("]").split(","))
    assert low < -0.5 < high
    o_low, o_high = (float(v) for v in got["optimal lr slope [95 %]"].split("[")[1].rstrip("]").split(","))
    assert o_low < -0.3 < o_high
    assert got["optimal lr per depth [95 %]"].startswith("2: ")
    drawn = pd.read_csv(tmp_path / "depth_law.csv")
    assert {"optimal lr optimum", "likelihood limit", "limit"} <= set(drawn["kind"])
    assert any("likelihood fit" in line for line in lines)


def test_losses_are_matched_to_the_points_from_the_run_folders():
    from normexp.runs.reading import Run

    def run(lr, seed, status, final, initial=5.5):
        cfg = {"placement.name": "post", "layers": 4, "lr": lr, "seed": seed}
        return Run(Path(f"r{lr}{seed}"), "x", cfg, [], {"status": status, "final_val_loss": final,
                                                         "initial_loss": initial})

    runs = [run(0.00173, 0, "completed", 2.8), run(0.00173, 1, "stalled", 6.0), run(0.01, 0, "diverged", None)]
    pts = pd.DataFrame([{"placement": "post", "layers": 4, "lr": 0.00173, "seed": 0},
                        {"placement": "post", "layers": 4, "lr": 0.00173, "seed": 1},
                        {"placement": "post", "layers": 4, "lr": 0.01, "seed": 0},
                        {"placement": "post", "layers": 4, "lr": 0.01, "seed": 1}])
    got = depth_law.with_losses(pts, runs, ["placement", "layers", "lr"])["loss"].tolist()
    # clipped at ℓ₀ (6.0 -> 5.5), a diverged run as ℓ₀, a point without a run: NaN
    assert got[:3] == [2.8, 5.5, 5.5] and math.isnan(got[3])


def test_a_budget_check_rerun_keeps_its_own_loss_apart_from_the_search_run():
    """The budget check reruns a point (same lr, seed) at N× the steps: each row of
    boundary_points gets its own run's loss, by steps_factor (before: the run read last won)."""
    from normexp.runs.reading import Run

    def run(steps, final):
        cfg = {"placement.name": "post", "layers": 2, "lr": 0.03, "seed": 1, "steps": steps}
        return Run(Path(f"r{steps}"), "x", cfg, [], {"status": "completed", "final_val_loss": final, "initial_loss": 5.5})

    pts = pd.DataFrame([{"placement": "post", "layers": 2, "lr": 0.03, "seed": 1, "steps_factor": f} for f in (1, 4)])
    for runs in ([run(200, 3.3), run(800, 2.5)], [run(800, 2.5), run(200, 3.3)]):
        assert depth_law.with_losses(pts, runs, ["placement", "layers", "lr"])["loss"].tolist() == [3.3, 2.5]


def test_the_likelihood_fit_leaves_out_budget_reruns_and_depths_too_slow_for_the_budget():
    """A depth whose upper edge learns at N× the steps bounds the budget, not stability: the fit
    must equal the fit over the other depths' search runs alone (its independent expectation),
    however that depth's runs and any budget reruns would have pulled it."""
    rng = np.random.default_rng(5)
    law = simulate_points(rng, slope=-0.5, sigma=0.2, depths=(2, 4, 8))
    law["placement"], law["steps_factor"] = "post", 1
    # depth 16: everything fails from 2e-4 up at the search's budget (would drag the slope far down) ...
    slow = pd.DataFrame([{"layers": 16, "lr": lr, "seed": k, "learned": "yes" if lr < 2e-4 else "no"}
                         for lr in (1e-4, 2e-4, 4e-4) for k in range(3)])
    slow["placement"], slow["steps_factor"] = "post", 1
    # ... and the budget check's reruns, all learned at 4× the steps, at depth 8 far above its limit
    reruns = pd.DataFrame([{"layers": 8, "lr": 0.5, "seed": k, "learned": "yes", "placement": "post", "steps_factor": 4}
                           for k in range(3)])
    points = pd.concat([law, slow, reruns], ignore_index=True)
    edges = {2: "stalled", 4: "stalled", 8: "stalled", 16: "too slow for the budget"}
    table = pd.DataFrame([{"placement": "post", "layers": d, "last_stable": 1e-3, "first_unstable": 2e-3,
                           "upper_edge": e, "upper_budget": ""} for d, e in edges.items()])
    got = depth_law.laws(table, ["placement"], points)[0]
    expected = depth_law.likelihood_fit(*depth_law.upper_side(law)[:3])
    assert got["lik"]["slope"] == pytest.approx(expected["slope"], abs=1e-9)
    assert got["lik_left_out"] == [(16, "too slow for the budget")]
    # the same depth without a window ("stuck everywhere": the search's word), its lowest failing
    # point learning at 4× the steps (the budget check's word): left out all the same
    table.loc[table["layers"] == 16, ["upper_edge", "upper_budget"]] = \
        ["stuck everywhere", "learns at ×4 steps at 0.0003 (learned 3): too slow for the budget"]
    got = depth_law.laws(table, ["placement"], points)[0]
    assert got["lik"]["slope"] == pytest.approx(expected["slope"], abs=1e-9)
    assert got["lik_left_out"] == [(16, "too slow for the budget")]
    with_all = depth_law.likelihood_fit(*depth_law.upper_side(points)[:3])   # what it would have been
    assert abs(with_all["slope"] - expected["slope"]) > 0.3


# ------------------------------------------------------------------ the methods page against its CSVs

def coverage_script():
    import importlib.util
    path = Path(__file__).resolve().parents[2] / "scripts" / "coverage.py"
    spec = importlib.util.spec_from_file_location("coverage_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_methods_page_tables_are_the_csvs():
    """Every number of the methods page's two coverage tables is its CSV's, as the script renders it."""
    script = coverage_script()
    folder = Path(__file__).resolve().parents[2] / "docs" / "results" / "methods"
    page = (folder / "README.md").read_text(encoding="utf-8")
    assert script.depth_law_markdown(pd.read_csv(folder / "depth_law_coverage.csv")) in page
    assert script.others_markdown(pd.read_csv(folder / "coverage.csv")) in page


def test_the_page_check_finds_an_altered_number(tmp_path):
    script = coverage_script()
    table = pd.DataFrame([{"condition": 0, "depths": "2-4-8", "sigma": 0.2, "tau": 0.0, "design": "×2 grid",
                           "method": m, "covered": c, "with_interval": 400, "coverage": c / 400,
                           "coverage_low": 0.9, "coverage_high": 0.99, "median_width": 1.0, "passes": "yes"}
                          for m, c in (("likelihood with depth scatter (report)", 380), ("likelihood, seeds only (before)", 370))])
    page = script.depth_law_markdown(table)
    assert "| 380 / 400 | 0.950 [0.900, 0.990] |" in page
    table.loc[0, "covered"] = 381
    assert script.depth_law_markdown(table) not in page
