"""How often do the report's 95 % intervals cover the truth? Simulated studies from a known law.

    PYTHONPATH=$PWD python scripts/coverage.py [--part depth_law|others|all] [--studies 400]
        [--conditions 0-5,12] [--out docs/results/methods]

--part depth_law (depth_law_coverage.csv): the depth law's slope interval in 24 designs, the ones
we publish and their neighbours: depths 2-4-8, 2-4-8-16 or 2-4-8-16-32-64; 3 seeds; seed spread
σ 0.2 or 0.5 (log lr); depth scatter τ 0 or 0.25; the lr searched by the real boundary search
(normexp.analysis.boundary.Search: 3e-4 .. 0.3, 4 initial points, upper edge to ×1.25, lower to
×2.5, the depth_law preset's) or a ×2 grid 5e-4 .. 0.256 with every seed at every lr (the
depth_transfer preset's). The truth is the simulator's, fixed in advance, not a fit: depth L's
centre limit is log 0.04 + u − 1.0·log(L/2) + δ_L (true slope −1.0; u ~ U(−0.5, 0.5) per study;
δ_L ~ N(0, τ²) per depth); seed k's limit is the centre + σ·ε_k (one per seed and depth); a run
at lr η learned iff log η ≤ its seed's limit and log η ≥ centre − log 8 (below: too slow);
above its limit it collapsed (30 % of seeds) or never learned. Each condition has its own RNG
seed (SEED + its number), so --conditions reruns a subset to the same numbers and updates only
its rows of the CSV. Per condition: the interval with the depth scatter term (the report's) and
without it (seeds only, χ²₁), the truth inside or not by depth_law.slope_inside (the test the
interval inverts); the full interval's median width from the first --widths studies, with the
count of studies where the test and the interval disagree (0 expected); the seeds-only interval
on the first --compare studies only (its cost).

--part others (coverage.csv): the optimal lr, means and LR sensitivity. The optimal lr: final
loss(η) = 2.6 + k·(log η − x*(L))² (k = 0.1; above the optimum k·asym) + N(0, 0.08²) per run,
x*(L) = log(3e-3) + u + s_opt·log(L/2), s_opt = −0.3, on the ×2.4 lr grid 1.25e-4 .. 0.1, depths
2..64; per depth depth_law.optimum's interval, and depth_law.optimum_slope's. Means and LR
sensitivity: 3 seeds; a mean's t-interval (study.t_interval) on normal and on lognormal draws;
the LR sensitivity of 5 lrs (seed k's loss = curve + seed offset + noise) with the t-interval over
seeds (study.seed_sensitivity) and the percentile bootstrap (study.bootstrap_sensitivity).

Coverage per method with its Clopper–Pearson 95 % interval (scipy.stats.binomtest); a row passes
when the coverage is ≥ 0.90 and the Clopper–Pearson lower end ≥ 0.85. Written under --out with a
figure each (coverage.png, depth_law_coverage.png), printed with the wall time.
"""

from __future__ import annotations

import argparse
import fcntl
import math
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from normexp.analysis import depth_law, study
from normexp.analysis.boundary import Search, initial_points

DEPTHS = (2, 4, 8, 16, 32, 64)               # the optimal lr's simulation
SEEDS = 3
SLOPE, LIMIT_AT_2 = -1.0, 0.04               # the depth law's truth
SLOPE_OPT = -0.3
DEPTH_SETS = ((2, 4, 8), (2, 4, 8, 16), (2, 4, 8, 16, 32, 64))
SIGMAS, TAUS, DESIGNS = (0.2, 0.5), (0.0, 0.25), ("search", "grid")
SEARCH_LOWER, SEARCH_UPPER, SEARCH_FIRST, SEARCH_RATIO, SEARCH_LOWER_RATIO = 3e-4, 0.3, 4, 1.25, 2.5
GRID_RATIO = 2.0
GRID = tuple(float(f"{5e-4 * GRID_RATIO ** k:.3g}") for k in range(10))    # 5e-4 .. 0.256
SEED = 20250139
TARGET, TARGET_LOW = 0.90, 0.85
# How the depth-scatter interval's profile points were refitted: from τ̂ and τ 0.3 since issue 57
# (depth_law.TAU_STARTS); rows without the column are from before, τ̂ only (τ stuck at 0 where τ̂ = 0).
PROFILE_STARTS = "τ̂ and τ " + ", ".join(f"{t:g}" for t in depth_law.TAU_STARTS)
OLD_PROFILE_STARTS = "τ̂ only (before issue 57)"


def true_centres(rng, depths, tau: float) -> np.ndarray:
    """log of each depth's centre limit: the law μ(L) = log LIMIT_AT_2 + u + SLOPE·log(L/2), u ~
    U(−0.5, 0.5) a per-study offset (the lrs tried fall differently on the truth every time), plus
    the depth's own offset δ_L ~ N(0, τ²)."""
    u = rng.uniform(-0.5, 0.5)
    z = np.log(np.asarray(depths, float) / 2)
    return math.log(LIMIT_AT_2) + u + SLOPE * z + tau * rng.standard_normal(len(depths))


def outcome(log_lr: float, centre: float, limit: float, unstable_kind: str) -> str:
    """A run's outcome: too slow below the window (centre − log 8), learned up to its seed's
    limit, above it collapsed or never learned (the seed's own kind)."""
    if log_lr < centre - math.log(8):
        return "never_learned"
    return "learned" if log_lr <= limit else unstable_kind


def simulate_study(rng, design: str, depths, sigma: float, tau: float) -> pd.DataFrame:
    """One depth-law study's boundary points (layers, lr, seed, learned), through the real
    boundary search to ×1.25 ("search") or on the ×2 grid, every seed at every lr ("grid")."""
    points = []
    for depth, centre in zip(depths, true_centres(rng, depths, tau)):
        limits = centre + sigma * rng.standard_normal(SEEDS)
        kinds = np.where(rng.random(SEEDS) < 0.3, "collapsed", "never_learned")
        if design == "grid":
            outcomes = {x: {k: outcome(math.log(x), centre, limits[k], kinds[k]) for k in range(SEEDS)}
                        for x in GRID}
        else:
            search = Search(setting=(("layers", depth),), lower=SEARCH_LOWER, upper=SEARCH_UPPER,
                            ratio=SEARCH_RATIO, lower_ratio=SEARCH_LOWER_RATIO)
            todo = initial_points(SEARCH_LOWER, SEARCH_UPPER, SEARCH_FIRST, False)
            while todo:
                for x in todo:
                    search.outcomes[x] = {k: outcome(math.log(x), centre, limits[k], kinds[k]) for k in range(SEEDS)}
                todo = search.next_points()
            outcomes = search.outcomes
        points += [{"layers": depth, "lr": x, "seed": k, "learned": "yes" if o == "learned" else "no"}
                   for x, seeds in outcomes.items() for k, o in seeds.items()]
    return pd.DataFrame(points)


def conditions() -> list[dict]:
    """The 24 designs: depths × seed spread σ × depth scatter τ × search or grid, each numbered."""
    grid = [(d, s, t, k) for d in DEPTH_SETS for s in SIGMAS for t in TAUS for k in DESIGNS]
    return [{"condition": i, "depths": d, "sigma": s, "tau": t, "design": k} for i, (d, s, t, k) in enumerate(grid)]


def depth_law_condition(c: dict, n: int, widths_of: int, compare_of: int) -> list[dict]:
    """Coverage of the slope's 95 % interval in one condition, n studies from its own RNG seed
    (SEED + condition number, so a subset reruns to the same numbers): with the depth scatter
    term (the report's interval) and, on the first `compare_of` studies, without it (seeds only,
    χ²₁: the interval before). Whether the truth is inside is depth_law.slope_inside's test; the
    full interval (its width, and a check that it agrees with the test) on the first `widths_of`."""
    rng = np.random.default_rng(SEED + c["condition"])
    hits = {True: 0, False: 0}
    fitted = {True: 0, False: 0}
    widths = {True: [], False: []}
    disagree = {True: 0, False: 0}
    for i in range(n):
        lows, highs, z, _ = depth_law.upper_side(simulate_study(rng, c["design"], c["depths"], c["sigma"], c["tau"]))
        for scatter in (True, False)[:2 if i < compare_of else 1]:
            inside = depth_law.slope_inside(lows, highs, z, SLOPE, scatter=scatter)
            if inside is None:
                continue
            fitted[scatter] += 1
            hits[scatter] += inside
            if i < widths_of:
                f = depth_law.likelihood_fit(lows, highs, z, scatter=scatter)
                widths[scatter].append(f["slope_high"] - f["slope_low"])
                disagree[scatter] += inside != (f["slope_low"] <= SLOPE <= f["slope_high"])
    design = {"search": f"search to ×{SEARCH_RATIO:g}", "grid": f"×{GRID_RATIO:g} grid"}[c["design"]]
    where = {"condition": c["condition"], "depths": "-".join(map(str, c["depths"])), "sigma": c["sigma"],
             "tau": c["tau"], "design": design, "true_slope": SLOPE}
    methods = ((True, "likelihood with depth scatter (report)"), (False, "likelihood, seeds only (before)"))
    return [{**where, **row("slope", method, hits[scatter], fitted[scatter], n if scatter else min(n, compare_of),
                            widths[scatter]),
             "width_studies": len(widths[scatter]), "test_and_interval_disagree": disagree[scatter],
             "profile_starts": PROFILE_STARTS if scatter else "-"}
            for scatter, method in methods[:2 if compare_of else 1]]


def parametric_bootstrap_before(cells: dict, samples: int, seed: int) -> tuple[float, float]:
    """The optimal lr's interval before issue 57, for the table's comparison rows: each lr's mean
    redrawn as mean + σ*·Z/√n (σ̂ pooled over the three lrs around the best, σ* = σ̂·√(df/χ²_df)),
    the parabola's vertex redone, percentiles of the draws."""
    lrs = sorted(cells)
    xs = np.log(np.asarray(lrs, float))
    vals = [np.asarray(cells[lr], float) for lr in lrs]
    means = np.array([v.mean() for v in vals])
    best = int(np.argmin(means))
    near = vals[best - 1:best + 2]
    df = sum(len(v) - 1 for v in near)
    sigma = math.sqrt(sum(((v - v.mean()) ** 2).sum() for v in near) / df)
    rng = np.random.default_rng(seed)
    n = np.array([len(v) for v in vals], float)
    scale = sigma * np.sqrt(df / rng.chisquare(df, size=(samples, 1)))
    draws = means + scale * rng.standard_normal((samples, len(lrs))) / np.sqrt(n)
    low, high = np.percentile(depth_law._vertex(xs, draws), [2.5, 97.5])
    return math.exp(low), math.exp(high)


def optimum_coverage(rng, n: int, asym: float, before: int) -> list[dict]:
    """The optimal lr per depth (depth_law.optimum's interval; on the first `before` studies also
    the parametric bootstrap it replaced) and its slope. An interval end open past the lrs tried
    (0 / ∞) counts as covering on its side; widths are taken over the studies with both ends
    inside the grid."""
    grid = 1.25e-4 * 2.4 ** np.arange(10)           # 1.25e-4 .. 0.33
    xs = np.log(grid)
    hits, placed_n, open_n, slope_hits, slope_n, wd, ws = 0, 0, 0, 0, 0, [], []
    old_hits, old_n, old_w = 0, 0, []
    for study_i in range(n):
        u = rng.uniform(-0.5, 0.5)
        placed = []
        for depth in DEPTHS:
            x_star = math.log(3e-3) + u + SLOPE_OPT * math.log(depth / 2)
            d = xs - x_star
            curve = 2.6 + 0.1 * d ** 2 * np.where(d > 0, asym, 1.0)
            cells = {lr: list(c + 0.08 * rng.standard_normal(SEEDS)) for lr, c in zip(grid, curve)}
            boot_seed = int(rng.integers(1 << 30))   # drawn always, so the studies are the same with any `before`
            o = depth_law.optimum(cells)
            if o["kind"] != "optimum" or math.isnan(o["low"]):
                continue
            placed_n += 1
            hits += o["low"] <= math.exp(x_star) <= o["high"]
            if 0 < o["low"] and math.isfinite(o["high"]):
                wd.append(math.log(o["high"] / o["low"]))
            else:
                open_n += 1
            placed.append((depth, o["lr"]))
            if study_i < before:
                low, high = parametric_bootstrap_before(cells, 400, boot_seed)
                old_n += 1
                old_hits += low <= math.exp(x_star) <= high
                old_w.append(math.log(high / low))
        s, lo, hi = depth_law.optimum_slope([p[0] for p in placed], [p[1] for p in placed])
        if math.isfinite(s):
            slope_n += 1
            slope_hits += lo <= SLOPE_OPT <= hi
            ws.append(hi - lo)
    what = f"optimal lr (×2.4 grid, loss {'symmetric' if asym == 1 else f'{asym:g}× steeper above'})"
    rows = [row(what, f"per depth: lrs that could be the best, one step out (width in log lr; {open_n} open)",
                hits, placed_n, placed_n, wd)]
    if before:
        rows.append(row(what, "per depth: parametric bootstrap (before issue 57)", old_hits, old_n, old_n, old_w))
    return rows + [row(what, "slope: least squares, t-interval", slope_hits, slope_n, n, ws)]


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
    """Coverage among the studies that gave an interval, its Clopper–Pearson 95 % interval, and
    whether it passes (coverage ≥ TARGET and the interval's lower end ≥ TARGET_LOW)."""
    if with_interval:
        ci = stats.binomtest(int(hits), int(with_interval)).proportion_ci(0.95, method="exact")
        low, high = ci.low, ci.high
    else:
        low = high = math.nan
    cov = hits / with_interval if with_interval else math.nan
    return {"quantity": quantity, "method": method, "studies": studies, "with_interval": with_interval,
            "covered": int(hits), "coverage": cov, "coverage_low": low, "coverage_high": high,
            "median_width": float(np.median(widths)) if len(widths) else math.nan,
            "meets_90": "yes" if cov >= TARGET else "NO",
            "passes": "yes" if cov >= TARGET and low >= TARGET_LOW else "NO"}


def figure(table: pd.DataFrame, labels: list[str], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 0.3 * len(table) + 1.6))
    y = np.arange(len(table))
    ok = (table["passes"] == "yes").to_numpy()
    cov = table["coverage"].to_numpy()
    ax.errorbar(cov, y, xerr=[cov - table["coverage_low"], table["coverage_high"] - cov],
                fmt="none", ecolor="0.3", capsize=3)
    ax.scatter(cov[ok], y[ok], color="tab:green", zorder=3, label="passes (≥ 0.90, CP lower ≥ 0.85)")
    ax.scatter(cov[~ok], y[~ok], color="tab:red", marker="x", s=60, zorder=3, label="fails")
    ax.axvline(0.95, color="k", lw=0.8, ls="--", label="nominal 95 %")
    ax.axvline(TARGET, color="tab:red", lw=0.8, ls=":", label="target 90 %")
    ax.set_yticks(y, labels, fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("coverage of the 95 % interval (Clopper–Pearson 95 % interval)")
    ax.set_xlim(min(0.3, float(table["coverage_low"].min()) - 0.05), 1.0)
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def coverage_cell(r: dict) -> str:
    """"0.953 [0.927, 0.971]", in bold where the row fails."""
    text = f"{r['coverage']:.3f} [{r['coverage_low']:.3f}, {r['coverage_high']:.3f}]"
    return text if r["passes"] == "yes" else f"**{text}**"


def depth_law_markdown(table: pd.DataFrame) -> str:
    """The methods page's table of depth_law_coverage.csv: one line per condition, the interval with
    the depth scatter term (with the starts its profile was refitted from: rows from before issue
    57 from τ̂ only) beside the seeds-only one (tests/analysis/test_stats_methods.py checks that the
    page holds exactly this)."""
    lines = ["| # | depths | σ | τ | lrs | with depth scatter: covered / studies | coverage [Clopper–Pearson 95 %] "
             "| median width | passes | profile refitted from | seeds only: covered / studies | coverage [CP 95 %] "
             "| median width |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for condition, rows in table.groupby("condition", sort=True):
        new = rows[rows["method"].str.contains("depth scatter")].iloc[0]
        old = rows[rows["method"].str.contains("seeds only")].iloc[0]
        lines.append(f"| {condition} | {new['depths']} | {new['sigma']:g} | {new['tau']:g} | {new['design']} "
                     f"| {new['covered']} / {new['with_interval']} | {coverage_cell(new)} | {new['median_width']:.2f} "
                     f"| {new['passes']} | {new.get('profile_starts', OLD_PROFILE_STARTS)} "
                     f"| {old['covered']} / {old['with_interval']} | {coverage_cell(old)} "
                     f"| {old['median_width']:.2f} |")
    return "\n".join(lines)


def others_markdown(table: pd.DataFrame) -> str:
    """The methods page's table of coverage.csv (checked like depth_law_markdown's)."""
    lines = ["| quantity | method | studies with an interval | covered | coverage [Clopper–Pearson 95 %] "
             "| median width | passes |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {r['quantity']} | {r['method']} | {r['with_interval']} | {r['covered']} | {coverage_cell(r)} "
              f"| {r['median_width']:.2f} | {r['passes']} |" for r in table.to_dict("records")]
    return "\n".join(lines)


def numbers(text: str) -> list[int]:
    """"0-5,12" -> [0, 1, 2, 3, 4, 5, 12]."""
    out = []
    for part in filter(None, text.split(",")):
        first, _, last = part.partition("-")
        out += range(int(first), int(last or first) + 1)
    return out


def run_depth_law(args) -> None:
    """The depth-law conditions asked for, in the order asked; after each, its rows replace its old
    ones in the CSV (under a lock: two processes may run two subsets into one folder)."""
    chosen = conditions() if args.conditions is None else [conditions()[i] for i in numbers(args.conditions)]
    for c in chosen:
        t0 = time.process_time()
        rows = depth_law_condition(c, args.studies, args.widths, args.compare)
        seeds_only = f"{rows[1]['coverage']:.3f} seeds only" if len(rows) > 1 else "seeds only not rerun"
        print(f"condition {c['condition']}: {rows[0]['coverage']:.3f} with the scatter term, "
              f"{seeds_only} ({time.process_time() - t0:.0f} s CPU)", flush=True)
        with open(Path(tempfile.gettempdir()) / "normexp_depth_law_coverage.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            write_depth_law(pd.DataFrame(rows), args.out)


def write_depth_law(rows: pd.DataFrame, out: Path) -> None:
    """depth_law_coverage.csv with `rows` in place of their conditions' old rows, and its figure."""
    path = out / "depth_law_coverage.csv"
    table = rows
    if path.is_file():   # the other conditions' rows stay
        old = pd.read_csv(path)
        if "profile_starts" not in old.columns:
            old["profile_starts"] = np.where(old["method"].str.contains("depth scatter"), OLD_PROFILE_STARTS, "-")
        replaced = old.set_index(["condition", "method"]).index.isin(rows.set_index(["condition", "method"]).index)
        table = pd.concat([old[~replaced], rows])   # a method not rerun (--compare 0: seeds only) keeps its rows
    table = table.sort_values(["condition", "method"], kind="stable").reset_index(drop=True)
    table.to_csv(path, index=False)
    labels = [f"{r['depths']}, σ {r['sigma']:g}, τ {r['tau']:g}, {r['design']}: {r['method'].split(' (')[0]}"
              for r in table.to_dict("records")]
    figure(table, labels, out / "depth_law_coverage.png",
           f"Depth-law slope: coverage of the 95 % interval (true slope {SLOPE:g})")


def run_others(args) -> None:
    rng = np.random.default_rng(SEED)
    n = args.studies
    rows = optimum_coverage(rng, n, 1.0, args.compare) + optimum_coverage(rng, n, 3.0, args.compare)
    rows += means_coverage(rng, n) + sensitivity_coverage(rng, n)
    table = pd.DataFrame(rows)
    table.to_csv(args.out / "coverage.csv", index=False)
    figure(table, [f"{q}\n{m}" for q, m in zip(table["quantity"], table["method"])], args.out / "coverage.png",
           "Simulated coverage of the report's 95 % intervals")
    with pd.option_context("display.width", 250, "display.max_colwidth", 60, "display.precision", 3):
        print(table.to_string(index=False))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=("depth_law", "others", "all"), default="all")
    p.add_argument("--studies", type=int, default=400)
    p.add_argument("--conditions", help="depth-law conditions to run, e.g. 0-5,12 (default: all 24)")
    p.add_argument("--widths", type=int, default=10, help="studies per condition whose full interval is found")
    p.add_argument("--compare", type=int, default=100,
                   help="studies per condition also fitted without the depth scatter term (0: those rows kept); "
                        "--part others: studies also given the optimal lr's interval from before issue 57")
    p.add_argument("--out", type=Path, default=Path("docs/results/methods"))
    args = p.parse_args()
    if args.conditions is not None:
        try:
            bad = [i for i in numbers(args.conditions) if not 0 <= i < len(conditions())]
        except ValueError:
            bad = [args.conditions]
        if bad:
            p.error(f"--conditions {args.conditions}: conditions are numbered 0-{len(conditions()) - 1}")
    t0 = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.part in ("depth_law", "all"):
        run_depth_law(args)
    if args.part in ("others", "all"):
        run_others(args)
    print(f"{args.studies} simulated studies per row, RNG seed {SEED}; wall time {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
