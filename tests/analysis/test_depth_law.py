"""The depth law (normexp/analysis/depth_law.py) and its report section on hand-made boundary.csv rows:
brackets placed around a known power law lr* = c·L^s, so the fit must return s and c·1000^s."""

import csv
import math

import numpy as np
import pandas as pd
import pytest

from normexp.analysis import depth_law
from normexp.analysis.report.sections import depth_law_section

COLUMNS = ["placement", "layers", "key", "last_stable", "first_unstable", "ratio", "verdict", "points_probed",
           "runs_used", "monotone", "seeds", "upper_edge", "upper_why", "lowest_learning", "highest_too_slow",
           "lower_edge", "lower_why", "runs_skipped"]


def row(placement, layers, low, high, edge="unstable"):
    return {"placement": placement, "layers": layers, "key": "lr", "last_stable": low, "first_unstable": high,
            "ratio": high / low if low and high else None, "verdict": "", "points_probed": 5, "runs_used": 9,
            "monotone": "yes", "seeds": 3, "upper_edge": edge, "upper_why": "diverged 1", "lowest_learning": low,
            "highest_too_slow": None, "lower_edge": "lower bound", "lower_why": "", "runs_skipped": 2}


def law_rows(placement, c, slope, depths, width=1.25):
    """Brackets ×width wide whose geometric middles lie exactly on c·L^slope."""
    return [row(placement, d, c * d ** slope / math.sqrt(width), c * d ** slope * math.sqrt(width)) for d in depths]


def test_the_fit_recovers_a_known_law_and_its_extrapolation():
    depths = [4, 8, 16, 32, 64, 128]
    rows = law_rows("post", 0.05, -1.0, depths)
    out = depth_law.fit(depths, [r["last_stable"] for r in rows], [r["first_unstable"] for r in rows])
    assert out["slope"] == pytest.approx(-1.0, abs=1e-9)
    assert out["at_1000"] == pytest.approx(0.05 / 1000, rel=1e-9)
    assert out["slope_low"] < -1.0 < out["slope_high"]
    # the bootstrap's width comes from the brackets only (the points sit on the line): a bracket
    # ×1.25 wide moves a point by at most ±ln(1.25)/2 in log lr; over ln(128/4) the slope moves
    # by at most 2·(ln 1.25 / 2)/ln 32 = 0.064 either way
    assert out["slope_high"] - out["slope_low"] < 2 * math.log(1.25) / math.log(32)
    assert out["at_1000_low"] < 0.05 / 1000 < out["at_1000_high"]


def test_wider_brackets_give_a_wider_interval():
    depths = [4, 8, 16, 32, 64, 128]
    narrow = depth_law.fit(depths, *zip(*[(r["last_stable"], r["first_unstable"]) for r in law_rows("a", 1, -0.5, depths)]))
    wide = depth_law.fit(depths, *zip(*[(r["last_stable"], r["first_unstable"])
                                         for r in law_rows("a", 1, -0.5, depths, width=4)]))
    assert wide["slope_high"] - wide["slope_low"] > narrow["slope_high"] - narrow["slope_low"]
    assert narrow["slope"] == pytest.approx(-0.5) and wide["slope"] == pytest.approx(-0.5)


def test_a_depth_without_an_upper_edge_is_never_a_limit():
    assert depth_law.depth_kind(row("post", 8, 1e-3, 2e-3)) == "limit"
    assert depth_law.depth_kind(row("post", 8, 1e-3, 2e-3, edge="stalled")) == "limit"
    assert depth_law.depth_kind(row("post", 8, 0.1, None, edge="upper bound")) == "at least"
    assert depth_law.depth_kind(row("post", 8, None, 1e-3, edge="nothing learned")) == "none"
    assert depth_law.depth_kind(row("post", 8, None, 1e-3, edge="no window")) == "none"
    # an old row (no upper_edge column): a bracket is a limit
    old = {"last_stable": 1e-3, "first_unstable": 2e-3}
    assert depth_law.depth_kind(old) == "limit"


def test_one_depth_is_no_law():
    out = depth_law.fit([8], [1e-3], [2e-3])
    assert math.isnan(out["slope"]) and math.isnan(out["at_1000"])


def write(folder, rows):
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "boundary.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows({k: "" if r.get(k) is None else r[k] for k in COLUMNS} for r in rows)
    return folder / "boundary.csv"


def test_the_report_section_on_hand_made_rows(tmp_path):
    depths = [4, 8, 16, 32, 64, 128]
    post = law_rows("post", 0.05, -1.0, depths[:4]) + [row("post", 64, None, 1e-3, edge="nothing learned"),
                                                        row("post", 128, None, 1e-3, edge="no window")]
    deepnorm = law_rows("deepnorm", 0.02, -0.25, depths[:5]) + [row("deepnorm", 128, 0.1, None, edge="upper bound")]
    table = write(tmp_path / "sweep", post + deepnorm)
    printed = []
    lines = depth_law_section([table], tmp_path, printed.append)
    assert lines and lines[0] == "## Depth law"
    assert (tmp_path / "depth_law.png").stat().st_size > 0
    got = {r["placement"]: r for r in pd.read_csv(tmp_path / "depth_law_slopes.csv").to_dict("records")}
    assert got["post"]["depths fitted"] == 4 and got["deepnorm"]["depths fitted"] == 5
    assert got["post"]["slope [95 %]"].startswith("-1.00 ")
    assert got["deepnorm"]["slope [95 %]"].startswith("-0.25 ")
    assert got["post"]["depths without a limit"] == "64: nothing learned; 128: no window"
    assert got["deepnorm"]["depths without a limit"] == "128: ≥ bound"
    assert got["post"]["limit at the shallowest depth"] == f"{0.05 / 4 / math.sqrt(1.25):.3g} .. " \
                                                          f"{0.05 / 4 * math.sqrt(1.25):.3g} at 4"
    assert got["post"]["extrapolated to 1000 blocks [95 %]"].startswith(f"{0.05 / 1000:.2g} ")
    # the figure's data: the depths without a limit are there, marked as such
    drawn = pd.read_csv(tmp_path / "depth_law.csv")
    kinds = {(r["placement"], r["layers"]): r["kind"] for r in drawn.to_dict("records")}
    assert kinds[("post", 64)] == kinds[("post", 128)] == "none" and kinds[("deepnorm", 128)] == "at least"
    assert kinds[("post", 4)] == "limit"
    assert "depth law" in printed[0]


def test_no_depth_law_without_several_depths(tmp_path):
    table = write(tmp_path / "one", [row("post", 8, 1e-3, 2e-3), row("pre", 8, 1e-3, 2e-3)])
    assert depth_law_section([table], tmp_path, print) == []


def test_a_study_where_nothing_learned_at_any_depth_is_drawn_not_a_crash(tmp_path):
    """Every depth "nothing learned" (a shrunk transfer sweep hit it): the figure has no lr to put
    on its log axis, only the ✕ marks at the axis, and must still be drawn with its data."""
    table = write(tmp_path / "sweep", [row("post", d, None, 1e-3, edge="nothing learned") for d in (2, 4)])
    lines = depth_law_section([table], tmp_path, lambda *_: None)
    assert lines and (tmp_path / "depth_law.png").stat().st_size > 0
    drawn = pd.read_csv(tmp_path / "depth_law.csv")
    assert sorted(drawn["layers"]) == [2, 4] and set(drawn["kind"]) == {"none"}


def _on_the_law_seeds():
    """Three seeds at 2, 4 and 8 blocks, each seed's limit log 0.04 − log(L/2) + ε (ε −0.25, 0,
    0.25 at every depth), bracketed on a ×1.25 lr grid: the depths sit on the law, so τ̂ = 0."""
    grid = [math.log(3e-4 * 1.25 ** k) for k in range(40)]
    lows, highs, z = [], [], []
    for depth in (2, 4, 8):
        for eps in (-0.25, 0.0, 0.25):
            limit = math.log(0.04) - math.log(depth / 2) + eps
            k = max(i for i, v in enumerate(grid) if v < limit)
            lows.append(grid[k])
            highs.append(grid[k + 1])
            z.append(math.log(depth))
    return lows, highs, z


def test_the_profile_interval_ends_where_the_profile_over_tau_crosses_its_threshold():
    """With τ̂ = 0 the slope's profile must still let τ rise: at each end of the interval the least
    twice-drop over a grid of fixed τ (c and σ refitted at each) equals the threshold, and it is
    reached at τ > 0. Before the fix τ stayed at its start 0 (zero numerical gradient below
    TAU_ZERO): the ends were the τ = 0 profile's, [−1.84, −0.20], where this drop is only 10.3
    (at τ 0.5) against 15.3."""
    lows, highs, z = _on_the_law_seeds()
    fit = depth_law.likelihood_fit(lows, highs, z)
    assert fit["depth_scatter"] < depth_law.TAU_ZERO
    seeds, z0 = depth_law._Seeds(*(np.asarray(v, float) for v in (lows, highs, z))), float(np.mean(z))
    nll = depth_law._minimize(seeds, z0)[0]
    threshold = depth_law.drop_threshold(3)
    taus = (0.0, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0)
    for end in (fit["slope_low"], fit["slope_high"]):
        drops = [2 * (depth_law._minimize(seeds, z0, {1: end, 3: tau})[0] - nll) for tau in taus]
        assert min(drops) == pytest.approx(threshold, abs=0.3)
        assert taus[int(np.argmin(drops))] > 0
    assert fit["slope_low"] < -2.5 and fit["slope_high"] > 0.5   # ~[−2.93, 0.89]; τ held at 0: [−1.84, −0.20]


def _points(rows):
    """boundary_points rows from (lr, seed, outcome, steps factor) at 2 blocks."""
    return pd.DataFrame([{"layers": 2, "lr": lr, "seed": seed, "learned": "yes" if o == "learned" else "no",
                          "outcome": o, "steps_factor": f} for lr, seed, o, f in rows])


def test_a_seed_limit_comes_from_that_seeds_own_failures_by_the_rule():
    """Per seed (issue 57): seed 0 stalls at 0.04 but learns there at ×2 steps, seed 1 is stuck at
    0.04 with no rerun: neither caps its limit; seed 2's stall at 0.04 is confirmed (stuck at ×2
    too) and caps it; every seed fails at 0.08 (collapsed or diverged). Hand-read brackets: seeds 0
    and 1 (0.04, 0.08] and (0.02, 0.08], seed 2 (0.02, 0.04]. The per-depth reading (upper_side:
    every run that did not learn within the budget caps) gave (0.02, 0.04] to all three."""
    pts = _points([(0.01, s, "learned", 1) for s in range(3)] + [
        (0.02, 0, "learned", 1), (0.02, 1, "learned", 1), (0.02, 2, "learned", 1),
        (0.04, 0, "slow", 1), (0.04, 0, "learned", 2), (0.04, 1, "stuck", 1),
        (0.04, 2, "stuck", 1), (0.04, 2, "stuck", 2),
        (0.08, 0, "collapsed", 1), (0.08, 1, "collapsed", 1), (0.08, 2, "diverged", 1)])
    lows, highs, z, dropped = depth_law.seed_rule_side(pts)
    got = [(round(math.exp(a), 4), round(math.exp(b), 4)) for a, b in zip(lows, highs)]
    assert got == [(0.04, 0.08), (0.02, 0.08), (0.02, 0.04)] and dropped == [] and z == [math.log(2)] * 3
    old = depth_law.upper_side(pts[pts["steps_factor"] == 1])
    assert [(round(math.exp(a), 4), round(math.exp(b), 4)) for a, b in zip(*old[:2])] == \
        [(0.02, 0.04)] * 3
    (per_seed_lows, per_seed_highs, _), left = depth_law.likelihood_inputs([], pts, per_seed=True)
    assert (per_seed_lows, per_seed_highs, left) == (lows, highs, [])


def test_a_seed_that_learns_at_n_times_the_steps_bounds_nothing_from_above():
    """A seed whose only failures are stalls that learn at ×4 has no upper bound (+inf), and a
    collapse in a rerun counts as a failure of that seed."""
    pts = _points([(0.01, 0, "learned", 1), (0.02, 0, "stuck", 1), (0.02, 0, "learned", 4),
                   (0.04, 0, "slow", 1), (0.04, 0, "learned", 4),
                   (0.01, 1, "learned", 1), (0.02, 1, "slow", 1), (0.02, 1, "collapsed", 4)])
    lows, highs, _, _ = depth_law.seed_rule_side(pts)
    assert [math.exp(lows[0]), highs[0]] == [pytest.approx(0.04), math.inf]
    assert [math.exp(lows[1]), math.exp(highs[1])] == [pytest.approx(0.01), pytest.approx(0.02)]
