"""How often do the report's 95 % intervals cover the truth? Simulated studies from a known law.

    PYTHONPATH=$PWD python scripts/coverage.py [--studies 200] [--out docs/results/methods]

Each simulated study is a depth-law sweep like ours: depths 2..64, 3 seeds, lr searched by the
real boundary search (normexp.analysis.boundary.Search: initial points 3e-4, 1.73e-3, 1e-2,
bisected to the scenario's ratio). Seed k at depth L learns at lr η iff
log η ≤ μ(L) + σ·ε_kL (one ε per seed and depth, normal: a seed has one limit, so its runs
at different lrs agree), μ(L) = log(6e-3) + u + s·log(L/2), s = −0.5, u ~ U(−0.5, 0.5) a
per-study offset so that the lrs tried fall differently on the truth every time; below
μ(L) − log 8 runs are too slow; above its limit a run collapsed (30 %) or never learned.
The slope's 95 % intervals compared: the bootstrap over depths (depth_law.fit, the old
method; studies with fewer than two bracketed depths have none) and the profile likelihood
(depth_law.likelihood_fit, every run of the upper side).

The optimal lr: final loss(η) = 2.6 + k·(log η − x*(L))² (k = 0.1; above the optimum
k·asym) + N(0, 0.08²) per run, x*(L) = log(3e-3) + u + s_opt·log(L/2), s_opt = −0.3, on the
×2.4 lr grid 1.25e-4 .. 0.1; per depth depth_law.optimum's interval, and depth_law.optimum_slope's.

Means and LR sensitivity: 3 seeds; a mean's t-interval (study.t_interval) on normal and on
lognormal draws; the LR sensitivity of 5 lrs (seed k's loss = curve + seed offset + noise) with
the t-interval over seeds (study.seed_sensitivity) and the percentile bootstrap
(study.bootstrap_sensitivity).

Coverage per method with its Clopper–Pearson 95 % interval (scipy.stats.binomtest); written to
coverage.csv and coverage.png under --out, and printed with the wall time. Fixed RNG seed.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from normexp.analysis import depth_law, study
from normexp.analysis.boundary import Search, initial_points

DEPTHS = (2, 4, 8, 16, 32, 64)
SEEDS = 3
LOWER, UPPER, FIRST = 3e-4, 1e-2, 3
SLOPE, SLOPE_OPT = -0.5, -0.3
SEED = 20250139
TARGET = 0.90


def simulate_search(rng, ratio: float, sigma: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One depth-law study: (boundary rows, boundary points) as the sweeper writes them."""
    u = rng.uniform(-0.5, 0.5)
    rows, points = [], []
    for depth in DEPTHS:
        mu = math.log(6e-3) + u + SLOPE * math.log(depth / 2)
        limits = mu + sigma * rng.standard_normal(SEEDS)
        unstable_kind = np.where(rng.random(SEEDS) < 0.3, "collapsed", "never_learned")
        search = Search(setting=(("layers", depth),), lower=LOWER, upper=UPPER, ratio=ratio)
        todo = initial_points(LOWER, UPPER, FIRST, False)
        while todo:
            for x in todo:
                for k in range(SEEDS):
                    if math.log(x) < mu - math.log(8):
                        o = "never_learned"
                    elif math.log(x) <= limits[k]:
                        o = "learned"
                    else:
                        o = unstable_kind[k]
                    search.outcomes.setdefault(x, {})[k] = o
                    search.runs += 1
            todo = search.next_points()
        rows.append(search.row("lr"))
        points += [{"layers": depth, "lr": x, "seed": k, "learned": "yes" if o == "learned" else "no"}
                   for x, seeds in search.outcomes.items() for k, o in seeds.items()]
    return pd.DataFrame(rows), pd.DataFrame(points)


def depth_law_coverage(rng, n: int, ratio: float, sigma: float) -> list[dict]:
    old, new, old_fitted, new_fitted, widths_old, widths_new = 0, 0, 0, 0, [], []
    for _ in range(n):
        table, points = simulate_search(rng, ratio, sigma)
        lim = [r for r in table.to_dict("records") if depth_law.depth_kind(r) == "limit"]
        f = depth_law.fit([r["layers"] for r in lim], [r["last_stable"] for r in lim],
                          [r["first_unstable"] for r in lim], samples=1000)
        if math.isfinite(f["slope"]):
            old_fitted += 1
            old += f["slope_low"] <= SLOPE <= f["slope_high"]
            widths_old.append(f["slope_high"] - f["slope_low"])
        g = depth_law.likelihood_fit(*depth_law.upper_side(points)[:3])
        if math.isfinite(g["slope"]):
            new_fitted += 1
            new += g["slope_low"] <= SLOPE <= g["slope_high"]
            widths_new.append(g["slope_high"] - g["slope_low"])
    what = f"max stable lr slope (×{ratio:g} brackets, seed σ = {sigma:g} in log lr)"
    return [row(what, "bootstrap over depths (old)", old, old_fitted, n, widths_old),
            row(what, "likelihood, profile (new)", new, new_fitted, n, widths_new)]


def optimum_coverage(rng, n: int, asym: float) -> list[dict]:
    grid = 1.25e-4 * 2.4 ** np.arange(10)           # 1.25e-4 .. 0.33
    xs = np.log(grid)
    per_depth_hits, per_depth_n, slope_hits, slope_n, wd, ws = 0, 0, 0, 0, [], []
    for _ in range(n):
        u = rng.uniform(-0.5, 0.5)
        opts, placed = {}, []
        for depth in DEPTHS:
            x_star = math.log(3e-3) + u + SLOPE_OPT * math.log(depth / 2)
            d = xs - x_star
            curve = 2.6 + 0.1 * d ** 2 * np.where(d > 0, asym, 1.0)
            cells = {lr: list(c + 0.08 * rng.standard_normal(SEEDS)) for lr, c in zip(grid, curve)}
            o = depth_law.optimum(cells, samples=400, seed=int(rng.integers(1 << 30)))
            if o["kind"] == "optimum" and math.isfinite(o["low"]):
                per_depth_n += 1
                per_depth_hits += o["low"] <= math.exp(x_star) <= o["high"]
                wd.append(math.log(o["high"] / o["low"]))
                placed.append((depth, o["lr"]))
        s, lo, hi = depth_law.optimum_slope([p[0] for p in placed], [p[1] for p in placed])
        if math.isfinite(s):
            slope_n += 1
            slope_hits += lo <= SLOPE_OPT <= hi
            ws.append(hi - lo)
    what = f"optimal lr (×2.4 grid, loss {'symmetric' if asym == 1 else f'{asym:g}× steeper above'})"
    return [row(what, "per depth: parametric bootstrap (width in log lr)", per_depth_hits, per_depth_n,
                per_depth_n, wd),
            row(what, "slope: least squares, t-interval", slope_hits, slope_n, n, ws)]


def means_coverage(rng, n: int) -> list[dict]:
    out = []
    for name, draw, truth in (("normal", lambda: rng.normal(2.8, 0.1, SEEDS), 2.8),
                              ("lognormal (skewed)", lambda: rng.lognormal(0, 0.5, SEEDS), math.exp(0.125))):
        hits, widths = 0, []
        for _ in range(n):
            _, lo, hi = study.t_interval(draw())
            hits += lo <= truth <= hi
            widths.append(hi - lo)
        out.append(row(f"mean of 3 seeds ({name})", "t-interval", hits, n, n, widths))
    return out


def sensitivity_coverage(rng, n: int) -> list[dict]:
    """5 lrs, curve 2.6 .. 3.3, seed k's loss = curve + a_k + e_k(η): a seed-wide offset and per-run noise."""
    curve = np.array([3.1, 2.75, 2.6, 2.7, 3.3])
    truth = float(np.mean(curve - curve.min()))
    t_hits, b_hits, tw, bw = 0, 0, [], []
    for _ in range(n):
        grid = curve[:, None] + 0.05 * rng.standard_normal(SEEDS)[None] + 0.08 * rng.standard_normal((5, SEEDS))
        _, lo, hi = study.seed_sensitivity([dict(enumerate(g)) for g in grid])
        t_hits += lo <= truth <= hi
        tw.append(hi - lo)
        blo, bhi = study.bootstrap_sensitivity(list(grid), samples=1000, seed=int(rng.integers(1 << 30)))
        b_hits += blo <= truth <= bhi
        bw.append(bhi - blo)
    what = "LR sensitivity (5 lrs, 3 seeds)"
    return [row(what, "t-interval over seeds (new)", t_hits, n, n, tw),
            row(what, "bootstrap over seeds (old)", b_hits, n, n, bw)]


def row(quantity: str, method: str, hits: int, with_interval: int, studies: int, widths) -> dict:
    """Coverage among the studies that gave an interval, its Clopper–Pearson 95 % interval."""
    if with_interval:
        ci = stats.binomtest(int(hits), int(with_interval)).proportion_ci(0.95, method="exact")
        low, high = ci.low, ci.high
    else:
        low = high = math.nan
    cov = hits / with_interval if with_interval else math.nan
    return {"quantity": quantity, "method": method, "studies": studies, "with_interval": with_interval,
            "covered": int(hits), "coverage": cov, "coverage_low": low, "coverage_high": high,
            "median_width": float(np.median(widths)) if len(widths) else math.nan,
            "meets_90": "yes" if cov >= TARGET else "NO"}


def figure(table: pd.DataFrame, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 0.42 * len(table) + 1.6))
    y = np.arange(len(table))
    ok = table["coverage"] >= TARGET
    ax.errorbar(table["coverage"], y, xerr=[table["coverage"] - table["coverage_low"],
                                           table["coverage_high"] - table["coverage"]],
                fmt="none", ecolor="0.3", capsize=3)
    ax.scatter(table["coverage"][ok], y[ok], color="tab:green", zorder=3, label="≥ 90 %")
    ax.scatter(table["coverage"][~ok], y[~ok], color="tab:red", marker="x", s=60, zorder=3, label="< 90 %")
    ax.axvline(0.95, color="k", lw=0.8, ls="--", label="nominal 95 %")
    ax.axvline(TARGET, color="tab:red", lw=0.8, ls=":", label="target 90 %")
    ax.set_yticks(y, [f"{q}\n{m}" for q, m in zip(table["quantity"], table["method"])], fontsize=6.5)
    ax.invert_yaxis()
    ax.set_xlabel("coverage of the 95 % interval (Clopper–Pearson 95 % interval)")
    ax.set_xlim(min(0.3, float(table["coverage_low"].min()) - 0.05), 1.0)
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title("Simulated coverage of the report's 95 % intervals", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--studies", type=int, default=200)
    p.add_argument("--out", type=Path, default=Path("docs/results/methods"))
    args = p.parse_args()
    t0 = time.time()
    rng = np.random.default_rng(SEED)
    n = args.studies
    rows = []
    for ratio, sigma in ((2.4, 0.3), (1.25, 0.3), (2.4, 0.1)):
        rows += depth_law_coverage(rng, n, ratio, sigma)
    rows += optimum_coverage(rng, n, 1.0) + optimum_coverage(rng, n, 3.0)
    rows += means_coverage(rng, n) + sensitivity_coverage(rng, n)
    table = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "coverage.csv", index=False)
    figure(table, args.out / "coverage.png")
    with pd.option_context("display.width", 250, "display.max_colwidth", 60, "display.precision", 3):
        print(table.to_string(index=False))
    print(f"{n} simulated studies per method, RNG seed {SEED}; wall time {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
