"""The depth law: how a setting's largest stable lr falls with depth, from boundary.csv rows.

A boundary search over lr at each depth (the `depth_law` preset: `layers` a swept key, lr
searched) leaves one row per (line, depth), a line being the other swept keys (placement ×
init). A depth's *limit* is its upper edge, kept only when the search found one above the
window of learning lrs (boundary.csv's upper_edge "unstable" — a seed collapsed or diverged —
or "stalled" — seeds never learned at an lr above one that learned). A depth whose search
reached its upper bound is a lower bound on the limit ("at least"); one where nothing learned
(nothing learned, no window, unstable everywhere) has no limit: it is shown as such, never fitted,
never called a stability limit.

The limit at depth L lies in its bracket [last stable, first unstable]; its point estimate is
the bracket's geometric middle. The law is an ordinary least-squares line through the points
on log-log axes, log lr* = a + s·log L: s is the slope, exp(a + s·log 1000) the limit it
extrapolates to 1,000 blocks. Its 95 % interval is a percentile bootstrap over the bracket and
the depths: each resample draws the depths with replacement and each drawn depth's limit
log-uniformly inside its bracket, then refits (2,000 resamples, a fixed RNG seed; a resample
with fewer than two distinct depths is drawn again). It holds for the bracket's width and the
scatter of the depths around the line, not for the seeds: a point is stable only when every
seed learned, so the seeds are already in each bracket.

Beside it (issue 39): `likelihood_fit`, an interval-censored fit over every seed at every depth
with profile-likelihood intervals, and `optimum`/`optimum_slope`, the lr of the lowest mean
final loss per depth and its slope; their sections below say how. scripts/coverage.py measures
how often each interval covers a simulated truth (docs/results/methods).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats
from scipy.optimize import brentq, minimize
from scipy.special import ndtr, stdtrit

from . import study
from ..runs import outcomes
from ..runs.outcomes import LEARNED

from .boundary import (TOO_SLOW_FOR_THE_BUDGET, at_search_budget, bracket_words, is_stability_limit, row_edge_class,
                       stable_bracket)

FIT_EDGES = ("unstable", "stalled")       # upper edges that are a limit
AT_LEAST = ("upper bound",)               # the search learned up to its bound: limit ≥ last stable
EXTRAPOLATE_TO = 1000                     # blocks
SAMPLES, SEED = 2000, 0


def _num(v) -> float | None:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def depth_kind(row: dict) -> str:
    """limit / at least / none: what a boundary.csv row says about the depth's stable lr.
    A row from before the outcome classes (no upper_edge) is a limit when bracketed."""
    low, high = _num(row.get("last_stable")), _num(row.get("first_unstable"))
    edge = row.get("upper_edge")
    if edge is None or (isinstance(edge, float) and math.isnan(edge)):
        edge = "unstable" if low and high else ("upper bound" if low else "none")
    if edge in FIT_EDGES and low and high:
        return "limit"
    if edge in AT_LEAST and low:
        return "at least"
    return "none"


def fit(depths, lows, highs, samples: int = SAMPLES, seed: int = SEED) -> dict:
    """The law through the bracketed limits: slope, intercept (natural logs), the limit at the
    shallowest depth (its bracket), the extrapolation to EXTRAPOLATE_TO blocks, and their
    bootstrap 95 % intervals (see the module). NaN where fewer than two depths are bracketed."""
    d = np.asarray(depths, float)
    lo, hi = np.log(np.asarray(lows, float)), np.log(np.asarray(highs, float))
    out = {"n_depths": len(d), "slope": math.nan, "slope_low": math.nan, "slope_high": math.nan,
           "intercept": math.nan, "at_1000": math.nan, "at_1000_low": math.nan, "at_1000_high": math.nan}
    if len(set(d.tolist())) < 2:
        return out
    x = np.log(d)
    slope, intercept = np.polyfit(x, (lo + hi) / 2, 1)
    out.update(slope=float(slope), intercept=float(intercept),
               at_1000=float(math.exp(intercept + slope * math.log(EXTRAPOLATE_TO))))
    rng = np.random.default_rng(seed)
    slopes, extrap = [], []
    while len(slopes) < samples:
        pick = rng.integers(0, len(d), len(d))
        if len(set(d[pick].tolist())) < 2:
            continue
        y = lo[pick] + rng.random(len(d)) * (hi[pick] - lo[pick])
        s, a = np.polyfit(x[pick], y, 1)
        slopes.append(s)
        extrap.append(math.exp(a + s * math.log(EXTRAPOLATE_TO)))
    out["slope_low"], out["slope_high"] = (float(v) for v in np.percentile(slopes, [2.5, 97.5]))
    out["at_1000_low"], out["at_1000_high"] = (float(v) for v in np.percentile(extrap, [2.5, 97.5]))
    return out


def line_label(key: tuple, cols: list[str]) -> str:
    return ", ".join(f"{c}={v}" for c, v in zip(cols, key)) or "all"


def _line_points(points, line_cols: list[str], key: tuple):
    if points is None:
        return None
    mine = points
    for c, v in zip(line_cols, key):
        mine = mine[mine[c].astype(str) == str(v)]
    return mine


def laws(table, line_cols: list[str], points=None) -> list[dict]:
    """One dict per line (placement × init ...): its depths by kind, the bootstrap fit (see
    `fit`) and, given `points` (boundary_points rows: line columns, layers, lr, seed, learned;
    with a `loss` column, each run's final loss clipped at ℓ₀), the likelihood fit ("lik",
    see `likelihood_fit`; "lik_left_out": [(depth, why)] of depths it leaves out — no seed learned,
    or the upper edge too slow for the budget), the optimal lr per
    depth ("optima": [(depth, `optimum`)]) and its slope ("opt_slope": (slope, low, high))."""
    out = []
    for key, rows in table.groupby(line_cols, sort=True) if line_cols else [((), table)]:
        key = key if isinstance(key, tuple) else (key,)
        rows = rows.sort_values("layers").to_dict("records")
        limits = [r for r in rows if depth_kind(r) == "limit"]
        law = fit([r["layers"] for r in limits], [r["last_stable"] for r in limits],
                  [r["first_unstable"] for r in limits])
        shallow = limits[0] if limits else None
        mine = _line_points(points, line_cols, key)
        lik, left, optima, opt_slope = None, [], [], (math.nan,) * 3
        if mine is not None and len(mine):
            mine = at_search_budget(mine)
            (lows, highs, z), left = likelihood_inputs(rows, mine)
            fitted = sorted({round(math.exp(v)) for v in z})
            lik = likelihood_fit(lows, highs, z, at_depths=[*fitted[:1], EXTRAPOLATE_TO])
            if "loss" in mine.columns:
                for depth, at in mine.groupby("layers", sort=True):
                    cells = {float(lr): [v for v in g["loss"].astype(float) if math.isfinite(v)]
                             for lr, g in at.groupby("lr")}
                    best = optimum(cells)
                    if not (at["learned"].astype(str) == "yes").any():  # the lowest plateau is no optimum
                        best.update(kind="nothing learned", lr=math.nan, low=math.nan, high=math.nan)
                    optima.append((int(depth), best))
                opt_slope = optimum_slope([d for d, o in optima if o["kind"] == "optimum"],
                                          [o["lr"] for d, o in optima if o["kind"] == "optimum"])
        out.append({"line": key, "rows": rows, **law, "lik": lik, "lik_left_out": left, "optima": optima,
                    "opt_slope": opt_slope, **rule_edges(rows, _line_points(points, line_cols, key)),
                    "shallowest": shallow and (int(shallow["layers"]), float(shallow["last_stable"]),
                                               float(shallow["first_unstable"])),
                    "not_limits": [(int(r["layers"]), depth_kind(r), _edge_words(r)) for r in rows
                                   if depth_kind(r) != "limit"]})
    return out


def rule_edges(rows: list[dict], points=None) -> dict:
    """The failure rule's reading of one line (boundary.FAILURE_RULE): "edges", one dict per depth
    (layers; class: the upper edge's edge_class, None without one; learns: the max lr that learns
    within the budget, (last stable, first failing), NaN ends where there is none; stable: the max
    stable lr, (low, high) with high None where no seed collapsed or diverged, None without `points`),
    and "lik_stable", the likelihood fit (`likelihood_fit`, the search's budget) over the depths whose
    upper edge is a stability limit only (None without points)."""
    edges = []
    has_outcomes = points is not None and len(points) > 0 and "outcome" in points.columns
    for row in rows:
        stable = None
        if has_outcomes:
            at = points[points["layers"].astype(int) == int(row["layers"])]
            stable = stable_bracket({float(lr): list(g["outcome"].astype(str)) for lr, g in at.groupby("lr")})
        low, high = _num(row.get("last_stable")), _num(row.get("first_unstable"))
        edges.append({"layers": int(row["layers"]), "class": row_edge_class(row),
                      "learns": (low or math.nan, high if low and high else math.nan), "stable": stable})
    lik_stable = None
    limits = [e["layers"] for e in edges if e["class"] is not None and is_stability_limit(e["class"])]
    if points is not None and len(points):
        # only the depths whose edge is a stability limit: elsewhere the searches bracket when runs
        # learn, and their few points above that edge do not place a collapse
        searched = at_search_budget(points)
        lows, highs, z, _ = upper_side(searched[searched["layers"].astype(int).isin(limits)])
        lik_stable = likelihood_fit(lows, highs, z, at_depths=limits[:1])
    return {"edges": edges, "lik_stable": lik_stable}


def rule_cells(r: dict) -> list[str]:
    """The slope table's failure-rule cells: the class of each depth's upper edge, how many of the
    bracketed edges are stability limits, the max stable lr per depth, and the likelihood slope over
    the depths whose edge is a stability limit (the slope of a stability limit proper)."""
    edges = r.get("edges") or []
    classes = "; ".join(f"{e['layers']}: {e['class'] or 'no edge'}" for e in edges) or "-"
    stable = "; ".join(f"{e['layers']}: " + (bracket_words(*e["stable"], "≥ {:.3g} (no collapse probed)")
                                             if e["stable"] else "-") for e in edges) or "-"
    classed = [e["class"] for e in edges if e["class"] is not None]
    limits = f"{sum(map(is_stability_limit, classed))} of {len(classed)}"
    lik = r.get("lik_stable")
    slope = (_interval(lik["slope"], lik["slope_low"], lik["slope_high"], "{:.2f}") + f" ({lik['depths']} depths)"
             if lik and math.isfinite(lik["slope"]) else "-")
    return [classes, limits, stable, slope]


RULE_HEAD = ["upper edge per depth (failure rule)", "stability limits among the bracketed edges",
             "max stable lr per depth (failure rule)", "slope, likelihood, stability limits only [95 %]"]


def likelihood_inputs(rows: list[dict], points, per_seed: bool = False) -> tuple[tuple[list, list, list],
                                                                                list[tuple[int, str]]]:
    """((lows, highs, log depths) for likelihood_fit, [(depth, why left out)]) of one line: its
    boundary.csv rows and its boundary_points rows at the search's budget. A depth whose upper edge
    learns at N× the steps (the budget check) bounds the budget, not stability: like the
    bootstrap, the likelihood fit leaves it out and says so (also a depth with no window whose
    lowest failing point learns at N× the steps: stuck everywhere); so is a depth where no seed learned.
    `per_seed`: each seed's limit by the failure rule read per seed (`seed_rule_side`; `points`
    then with the budget check's reruns), not by whether it learned within the budget."""
    budget_limited = sorted({int(r["layers"]) for r in rows if r.get("upper_edge") == TOO_SLOW_FOR_THE_BUDGET
                             or TOO_SLOW_FOR_THE_BUDGET in str(r.get("upper_budget", ""))})
    kept = points[~points["layers"].astype(int).isin(budget_limited)]
    lows, highs, z, no_seed = seed_rule_side(kept) if per_seed else upper_side(at_search_budget(kept))
    left = sorted([(d, "no seed learned") for d in no_seed] + [(d, TOO_SLOW_FOR_THE_BUDGET) for d in budget_limited])
    return (lows, highs, z), left


def _edge_words(row: dict) -> str:
    """A depth's upper edge in words, with the budget check's verdict where it is "too slow for
    the budget" and the edge does not say so already ("stuck everywhere; too slow for the budget")."""
    edge = str(row.get("upper_edge", ""))
    if TOO_SLOW_FOR_THE_BUDGET in str(row.get("upper_budget", "")) and edge != TOO_SLOW_FOR_THE_BUDGET:
        return f"{edge}; {TOO_SLOW_FOR_THE_BUDGET}"
    return edge


def table_rows(results: list[dict], line_cols: list[str]) -> tuple[list[str], list[list[str]]]:
    """The slope table: one row per line."""
    head = [*line_cols, "depths fitted", "slope [95 %]", "limit at the shallowest depth",
            f"extrapolated to {EXTRAPOLATE_TO} blocks [95 %]", "depths without a limit"]
    rows = []
    for r in results:
        ok = math.isfinite(r["slope"])
        shallow = r["shallowest"]
        rows.append([*map(str, r["line"]), str(r["n_depths"]),
                     f"{r['slope']:.2f} [{r['slope_low']:.2f}, {r['slope_high']:.2f}]" if ok else "-",
                     f"{shallow[1]:.3g} .. {shallow[2]:.3g} at {shallow[0]}" if shallow else "-",
                     f"{r['at_1000']:.2g} [{r['at_1000_low']:.2g}, {r['at_1000_high']:.2g}]" if ok else "-",
                     "; ".join(f"{d}: {'≥ bound' if kind == 'at least' else edge or 'none'}"
                               for d, kind, edge in r["not_limits"]) or "-"])
    if any(r["lik"] is not None for r in results):  # the likelihood fit and the optimal lr beside
        head += ["slope, likelihood [95 %]", "limit (50 %) at the shallowest depth [95 %]",
                 f"likelihood at {EXTRAPOLATE_TO} blocks [95 %]", "seed × depth limits fitted (depths left out)",
                 "optimal lr per depth [95 %]", "optimal lr slope [95 %]"]
        for r, row in zip(results, rows):
            row += likelihood_cells(r) + optimum_cells(r)
    head += RULE_HEAD
    for r, row in zip(results, rows):
        row += rule_cells(r)
    return head, rows


def _interval(v, low, high, pattern: str) -> str:
    if not math.isfinite(v):
        return "-"
    return f"{pattern.format(v)} [{pattern.format(low)}, {pattern.format(high)}]"


def likelihood_cells(r: dict) -> list[str]:
    """The likelihood fit's four cells of the slope table."""
    lik = r["lik"]
    if lik is None or not math.isfinite(lik["slope"]):
        runs = f"{lik['runs']} seed limits, none placed (needs a failure above a learned lr at 2 depths)" if lik else "0"
        return ["-", "-", "-", runs + _left_out(r)]
    (shallow, at), (far, extra) = list(lik["limits"].items())
    return [_interval(lik["slope"], lik["slope_low"], lik["slope_high"], "{:.2f}"),
            _interval(*at, "{:.3g}") + f" at {shallow}", _interval(*extra, "{:.2g}"),
            f"{lik['runs']} seed limits at {lik['depths']} depths, σ {lik['width']:.2f}, τ {lik['depth_scatter']:.2f}"
            + _left_out(r)]


def _left_out(r: dict) -> str:
    """" (8: no seed learned; 2, 4: too slow for the budget)": the depths the likelihood fit left out, by reason."""
    by_why: dict[str, list[int]] = {}
    for depth, why in r["lik_left_out"]:
        by_why.setdefault(why, []).append(depth)
    return f" ({'; '.join(', '.join(map(str, d)) + ': ' + why for why, d in by_why.items())})" if by_why else ""


def optimum_interval_words(o: dict, fmt: str) -> str:
    """" [low, high]" of an optimum's interval ("0" / "∞" at an end open past the lrs tried);
    "" without one."""
    if math.isnan(o["low"]):
        return ""
    high = "∞" if o["high"] == math.inf else fmt.format(o["high"])
    return f" [{fmt.format(o['low'])}, {high}]"


def optimum_cells(r: dict) -> list[str]:
    """The optimal lr's two cells: per depth the optimum [95 %] (or ≤ / ≥ the lrs tried), its slope."""
    def one(depth, o):
        if o["kind"] == "optimum":
            return f"{depth}: {o['lr']:.2g}{optimum_interval_words(o, '{:.2g}')}"
        return f"{depth}: {o['kind']} {o['best_grid_lr']:.3g}" if o["kind"] in ("≤", "≥") else f"{depth}: {o['kind']}"

    per_depth = "; ".join(one(d, o) for d, o in r["optima"]) or "-"
    return [per_depth, _interval(*r["opt_slope"], "{:.2f}")]


def _draw_rule(ax, r: dict, color, k: int, line_cols: list[str], data: list) -> None:
    """The failure rule on the depth-law panel: each bracketed edge's point filled where it is a
    stability limit and hollow where not, and the max stable lr per depth as a diamond (its bracket
    as an error bar; an arrow up where no seed collapsed or diverged up to the largest lr probed)."""
    for e in r.get("edges") or []:
        low, high = e["learns"]
        if e["class"] is not None and math.isfinite(low) and math.isfinite(high):
            ax.plot(e["layers"] * (1 + 0.03 * k), math.sqrt(low * high), "o", ms=7, color=color,
                    mfc=color if is_stability_limit(e["class"]) else "white", zorder=3)
        if not e["stable"] or e["stable"][0] is None:
            continue
        s_low, s_high = e["stable"]
        x = e["layers"] * (1.08 + 0.03 * k)
        if s_high is None:
            ax.plot(x, s_low, "d", color=color, mfc="none", ms=6)
            ax.annotate("", (x, s_low * 1.6), (x, s_low), arrowprops={"arrowstyle": "->", "color": color, "lw": 0.8})
        else:
            mid = math.sqrt(s_low * s_high)
            ax.errorbar([x], [mid], yerr=[[mid - s_low], [s_high - mid]], fmt="d", color=color, mfc="none", ms=6,
                        capsize=2)
        data.append({**dict(zip(line_cols, r["line"])), "layers": e["layers"], "kind": "max stable lr (failure rule)",
                     "last_stable": s_low, "first_unstable": s_high, "upper_edge": e["class"]})


def _draw_optima(ax, r: dict, color, label: str, line_cols: list[str], data: list) -> None:
    """The optimal lr per depth (error bar: its interval; ▽/△: censored at the lrs tried) and
    its least-squares line, dotted."""
    placed = [(d, o) for d, o in r["optima"] if o["kind"] == "optimum"]
    slope = r["opt_slope"][0]
    if placed:
        d = np.array([p[0] for p in placed], float)
        v = np.array([p[1]["lr"] for p in placed])
        # an end open past the lrs tried (0 / ∞): the bar stops at the lr itself, an arrow goes on
        lo = np.array([p[1]["low"] if math.isfinite(p[1]["low"]) and p[1]["low"] > 0 else p[1]["lr"] for p in placed])
        hi = np.array([p[1]["high"] if math.isfinite(p[1]["high"]) else p[1]["lr"] for p in placed])
        ax.errorbar(d, v, yerr=[v - lo, hi - v], fmt="s", color=color, capsize=3, ms=4,
                    label=f"{label}: slope {slope:.2f}" if math.isfinite(slope) else label)
        for i, (depth, o) in enumerate(placed):   # an end open past the lrs tried: an arrow from its last bound on
            for end, bound, towards in (("low", lo[i], 1 / 3), ("high", hi[i], 3)):
                if o[end] in (0, math.inf):
                    ax.annotate("", (depth, bound * towards), (depth, bound),
                                arrowprops={"arrowstyle": "->", "color": color, "lw": 0.8})
        if math.isfinite(slope):
            b = np.mean(np.log(v)) - slope * np.mean(np.log(d))
            ax.plot(d, np.exp(b + slope * np.log(d)), ":", color=color)
    for depth, o in r["optima"]:
        if o["kind"] in ("≤", "≥"):
            ax.plot(depth, o["best_grid_lr"], "v" if o["kind"] == "≤" else "^", color=color, mfc="none", ms=7)
        data.append({**dict(zip(line_cols, r["line"])), "layers": depth, "kind": f"optimal lr {o['kind']}",
                     "lr": o["lr"] if o["kind"] == "optimum" else o["best_grid_lr"], "low": o["low"], "high": o["high"]})


def draw(results: list[dict], line_cols: list[str], path, save) -> None:
    """max stable lr vs depth, log-log: each bracket an error bar around its geometric middle,
    the fitted line dashed (to 1,000 blocks); ▲ = at least (the search's upper bound learned),
    ✕ on the axis = no limit found (nothing learned, or no window)."""
    import matplotlib.pyplot as plt  # why here: after report.figures.pyplot() chose the Agg backend

    with_optima = any(r.get("optima") for r in results)
    fig, axes = plt.subplots(1, 2 if with_optima else 1, figsize=(13 if with_optima else 7.5, 5), squeeze=False)
    ax = axes[0, 0]
    data = []
    for k, r in enumerate(results):
        color = f"C{k % 10}"
        label = line_label(r["line"], line_cols)
        lim = [row for row in r["rows"] if depth_kind(row) == "limit"]
        if lim:
            d = np.array([row["layers"] for row in lim], float)
            lo, hi = np.array([row["last_stable"] for row in lim]), np.array([row["first_unstable"] for row in lim])
            mid = np.sqrt(lo * hi)
            ax.errorbar(d * (1 + 0.03 * k), mid, yerr=[mid - lo, hi - mid], fmt="o-", color=color, capsize=3,
                        ms=4, label=f"{label}: slope {r['slope']:.2f}" if math.isfinite(r["slope"]) else label)
        if math.isfinite(r["slope"]):
            xs = np.geomspace(min(row["layers"] for row in lim), EXTRAPOLATE_TO, 50)
            ax.plot(xs, np.exp(r["intercept"] + r["slope"] * np.log(xs)), "--", color=color, lw=0.8)
        lik = r.get("lik")
        if lik and all(map(math.isfinite, (lik["slope"], lik["slope_low"], lik["slope_high"]))):
            # the likelihood fit, solid through its 50 % limits (not drawn while its interval is open)
            (d0, (v0, *_)), (d1, (v1, *_)) = list(lik["limits"].items())
            ax.plot([d0, d1], [v0, v1], "-", color=color, lw=1.6, alpha=0.6)
            data.append({**dict(zip(line_cols, r["line"])), "layers": d0, "kind": "likelihood limit", "lr": v0})
            data.append({**dict(zip(line_cols, r["line"])), "layers": d1, "kind": "likelihood limit", "lr": v1})
        _draw_rule(ax, r, color, k, line_cols, data)
        if with_optima:
            _draw_optima(axes[0, 1], r, color, label, line_cols, data)
        for row in r["rows"]:
            kind = depth_kind(row)
            if kind == "at least":
                ax.plot(row["layers"], row["last_stable"], "^", color=color, ms=7, mfc="none")
            elif kind == "none":
                ax.plot(row["layers"], 0, "x", color=color, ms=7, transform=ax.get_xaxis_transform(), clip_on=False,
                        scaley=False)  # at the axis, in axes units: no lr to scale the log axis by
            data.append({**dict(zip(line_cols, r["line"])), "layers": row["layers"], "kind": kind,
                         "last_stable": row["last_stable"], "first_unstable": row["first_unstable"],
                         "upper_edge": row.get("upper_edge"), "edge_class": row_edge_class(row)})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("depth (blocks)")
    ax.set_ylabel("max lr that learns within the budget (o, bracket)\nmax stable lr by the failure rule (◇)")
    ax.grid(alpha=0.3, which="both")
    if ax.get_legend_handles_labels()[0]:  # no labelled line where no depth has a limit
        ax.legend(fontsize=7)
    ax.set_title("Depth law: dashed = bootstrap fit, solid = likelihood fit (50 % limit), to 1,000 blocks; ▲ at least "
                 "(upper bound learned);\n✕ on the axis = no limit (nothing learned, or no window); o filled: a stability "
                 "limit, hollow: a speed edge or unchecked stall; ◇ max stable lr (↑: no collapse probed)", fontsize=7)
    if with_optima:
        axes[0, 1].set_xscale("log")
        axes[0, 1].set_yscale("log")
        axes[0, 1].set_xlabel("depth (blocks)")
        axes[0, 1].xaxis.set_minor_formatter(plt.NullFormatter())
        axes[0, 1].set_ylabel("optimal lr (lowest mean final loss)")
        axes[0, 1].grid(alpha=0.3, which="both")
        axes[0, 1].legend(fontsize=7)
        axes[0, 1].set_title("Optimal lr: parabola vertex in log lr; 95 %: the lrs that could be the best, one lr step out;\n"
                             "dotted = least-squares line; ▽/△ = best at the lowest/highest lr tried", fontsize=8)
    save(fig, path, pd.DataFrame(data))


# ------------------------------------------------------------ the likelihood fit (every run)
#
# The bootstrap above uses one number per depth (a bracket where *every* seed learned) and drops
# the censored depths. The fit below uses every run of the upper side, seeds as data. Each seed
# k at depth L has its own limit, log lr*_kL = μ(L) + δ_L + σ·ε_kL: μ(L) = c + s·(log L − log L₀)
# is the law (the limit at which half the seeds learn at a depth on the law), δ_L ~ N(0, τ²) a
# depth's own offset from it (depths scatter about a power law: τ, the depth scatter), σ the
# seeds' scatter within a depth, s the slope d log lr*/d log L. A seed's runs tell an interval
# for its limit (interval-censored regression): above the largest lr where it learned, at or
# below the smallest lr above that where it failed; no failure above: at least that lr
# (right-censored, "≥ bound"); no learned run: below the smallest lr of the upper side
# (left-censored). One term per seed and depth, not per run: a seed's runs at several lrs are
# one limit seen several times. A depth's seeds share δ_L, so its likelihood is the product of
# its seeds' interval probabilities integrated over δ_L (Gauss–Legendre, LEGENDRE_NODES nodes on
# the part of the line where both the integrand and N(0, τ²) have mass). The upper side of a
# depth: its runs from the smallest lr where some seed learned upwards (below it runs are too
# slow, the window's other edge); a depth where no seed learned tells neither edge and is left
# out (listed). Maximum likelihood (scipy.optimize, L-BFGS-B), σ kept in [W_MIN, W_MAX], τ in
# [0, TAU_MAX]; τ̂ = 0 (the depths sit on the law as closely as their seeds allow) is the fit
# without the depth term.
#
# 95 % intervals: profile likelihood (the parameter fixed, the others refitted from τ̂ and from
# each τ in TAU_STARTS, the best kept: from τ̂ = 0 alone τ could not leave 0), the interval
# where twice the log-likelihood drop stays under a threshold; an edge the profile does not reach
# within PROFILE_SPAN is open (±inf). With J depths the law has J − 2 degrees of freedom for the
# depth scatter, and the threshold is the one that is exact when τ dominates (a normal linear
# regression with unknown variance: the drop is J·log(1 + t²/(J − 2)), t ~ t_{J−2}):
# J·log(1 + t²_{J−2, 0.975}/(J − 2)) — 15.3 at 3 depths, 9.3 at 4, 6.4 at 6, → χ²₁(0.95) = 3.84 as
# J grows. Where τ = 0 it is conservative (the interval ~×2 wider than it needs at 3 depths, ×1.3
# at 6); the χ²₁ threshold there under-covered once depths scatter (docs/results/methods). Two
# depths leave no degree of freedom: the slope then has no interval (±inf). `scatter=False` is the
# fit without the depth term and with the χ²₁ threshold: the seeds-only interval, kept for
# comparison.

PROB = 0.5                      # the limit is the lr at which half the seeds learn
W_MIN, W_MAX = 0.02, 5.0        # σ, the seeds' scatter in log lr
TAU_MAX = 3.0                   # τ, the depths' scatter about the law, in log lr
TAU_ZERO = 1e-6                 # τ below this is no depth term (the integral is the point δ = 0)
TAU_STARTS = (0.3,)             # a profile point is refitted from τ̂ and from each of these too (see _profile_interval)
PROFILE_SPAN = 12.0             # how far (in slope units, or log lr) a profile edge is looked for
CHI2_95 = 3.841458820694124     # scipy.stats.chi2.ppf(0.95, 1)
LEGENDRE_NODES = 32
_GL_X, _GL_W = np.polynomial.legendre.leggauss(LEGENDRE_NODES)
ZOOM_NODES, ZOOMS = 6, 3        # a depth's integrand on fewer nodes than this is integrated again, closer


def drop_threshold(depths: int, coefficients: int = 2) -> float:
    """Twice the log-likelihood drop a 95 % profile interval allows with `depths` depths (over
    all lines fitted together) and a depth scatter term, the lines' laws having `coefficients`
    intercepts and slopes in all (see the section's comment); inf with no degree of freedom left."""
    df = depths - coefficients
    if df < 1:
        return math.inf
    return depths * math.log1p(stats.t.ppf(0.975, df) ** 2 / df)


def upper_side(points) -> tuple[list, list, list, list[int]]:
    """(low, high, log depth, depths left out) of one line's boundary_points rows (columns
    layers, lr, seed, learned yes/no): per seed and depth the interval (low, high] in log lr
    that holds its limit, from the depth's runs at lrs from its smallest lr where some seed
    learned upwards (low = -inf, high = +inf where censored); a depth where no seed learned is
    left out."""
    lows, highs, z, dropped = [], [], [], []
    for depth, rows in points.groupby("layers", sort=True):
        learned = rows["learned"].astype(str) == "yes"
        if not learned.any():
            dropped.append(int(depth))
            continue
        start = rows.loc[learned, "lr"].astype(float).min()
        kept = rows[rows["lr"].astype(float) >= start]
        for _, runs in kept.groupby("seed", sort=True):
            lr, ok = runs["lr"].astype(float).to_numpy(), (runs["learned"].astype(str) == "yes").to_numpy()
            low = float(lr[ok].max()) if ok.any() else None
            above = lr[~ok & (lr > low)] if low is not None else lr[~ok]
            lows.append(math.log(low) if low is not None else -math.inf)
            highs.append(math.log(float(above.min())) if len(above) else math.inf)
            z.append(math.log(float(depth)))
    return lows, highs, z, dropped


def seed_rule_side(points) -> tuple[list, list, list, list[int]]:
    """upper_side by the failure rule read per seed (issue 57): one line's boundary_points rows,
    the budget check's reruns included (steps_factor > 1; columns layers, lr, seed, learned,
    outcome). A seed's limit lies above the largest lr where *it* learned (at the search's budget
    or at ×N the steps: a run that learns at ×N is stable there) and at or below the smallest lr
    above that where *it* failed as the rule counts a failure: it collapsed or diverged (at any
    budget), or it stalled and its own rerun at ×N stalled too (a confirmed stall). A stall with no
    rerun, or one whose rerun learned, bounds nothing from above; no such failure above: at least
    that lr (+inf). The upper side and the depths left out (no seed learned at the search's
    budget) are upper_side's. Rows without an outcome column: upper_side's reading."""
    if "outcome" not in points.columns:
        return upper_side(points)
    searched = at_search_budget(points)
    factor = points["steps_factor"].astype(int) if "steps_factor" in points.columns else pd.Series(1, points.index)
    reruns = points[factor > 1]
    lows, highs, z, dropped = [], [], [], []
    for depth, rows in searched.groupby("layers", sort=True):
        learned = rows["learned"].astype(str) == "yes"
        if not learned.any():
            dropped.append(int(depth))
            continue
        start = rows.loc[learned, "lr"].astype(float).min()
        mine = reruns[reruns["layers"].astype(int) == int(depth)]
        for seed, runs in rows[rows["lr"].astype(float) >= start].groupby("seed", sort=True):
            again = {float(r["lr"]): str(r["outcome"]) for r in mine[mine["seed"] == seed].to_dict("records")
                     if float(r["lr"]) >= start}
            stable, failed = [], []
            for r in runs.to_dict("records"):
                lr, seen = float(r["lr"]), str(r["outcome"])
                rerun = again.get(lr)
                if seen == LEARNED or rerun == LEARNED:
                    stable.append(lr)
                elif outcomes.is_unstable(seen) or outcomes.is_unstable(rerun) or rerun is not None:
                    failed.append(lr)          # collapsed, diverged, or a stall its rerun confirmed
            low = max(stable) if stable else None
            above = [lr for lr in failed if low is None or lr > low]
            lows.append(math.log(low) if low is not None else -math.inf)
            highs.append(math.log(min(above)) if above else math.inf)
            z.append(math.log(float(depth)))
    return lows, highs, z, dropped


class _Seeds:
    """The seed intervals grouped by depth: a (J, K) array of lows and of highs (a depth with
    fewer seeds padded with (-inf, inf), probability 1), the depths' log depth, and per depth
    the span where its seeds' intervals put the depth's centre (see `_centre_span`)."""

    def __init__(self, a, b, z):
        depths = sorted(set(z.tolist()))
        width = max(int(np.sum(z == d)) for d in depths)
        self.a = np.full((len(depths), width), -np.inf)
        self.b = np.full((len(depths), width), np.inf)
        for j, d in enumerate(depths):
            mine = z == d
            self.a[j, :mine.sum()], self.b[j, :mine.sum()] = a[mine], b[mine]
        self.z = np.asarray(depths)
        self.top_low, self.bottom_high = self.a.max(axis=1), self.b.min(axis=1)


def _interval_log_p(a, b, centre, w):
    """log P(a < centre + w·ε ≤ b), elementwise, in the tail it sits in for precision."""
    ha, hb = (a - centre) / w, (b - centre) / w
    p = np.where(ha > 0, ndtr(-ha) - ndtr(-hb), ndtr(hb) - ndtr(ha))
    return np.log(np.maximum(p, 1e-300))


def _centre_terms(seeds: _Seeds, rows, mu, w, tau, lo, hi):
    """Per depth in `rows`: the Gauss–Legendre nodes on [lo, hi] for the depth's centre and the
    log of each node's term (its seeds' interval probabilities × N(μ, τ²) × the node's weight)."""
    centre = lo[:, None] + (hi - lo)[:, None] * (_GL_X + 1) / 2                        # (rows, nodes)
    log_seeds = _interval_log_p(seeds.a[rows, None, :], seeds.b[rows, None, :], centre[:, :, None], w).sum(axis=2)
    log_prior = -0.5 * ((centre - mu[rows, None]) / tau) ** 2 - math.log(tau * math.sqrt(2 * math.pi))
    return centre, log_seeds + log_prior + np.log(_GL_W)[None] + np.log((hi - lo) / 2)[:, None]


def _nll(theta, seeds: _Seeds, z0):
    """The negative log-likelihood at θ = (c, s, log σ, τ)."""
    c, s, log_w, tau = theta
    mu, w = c + s * (seeds.z - z0), math.exp(log_w)
    if tau < TAU_ZERO:
        return -float(np.sum(_interval_log_p(seeds.a, seeds.b, mu[:, None], w)))
    # the depth's centre μ + δ has mass where its seeds' intervals meet (±6σ) and within ±8τ of μ
    lo = np.minimum(seeds.top_low, seeds.bottom_high) - 6 * w
    hi = np.maximum(seeds.top_low, seeds.bottom_high) + 6 * w
    lo, hi = np.maximum(lo, mu - 8 * tau), np.minimum(hi, mu + 8 * tau)
    hi = np.maximum(hi, lo + 1e-9)
    rows = np.arange(len(mu))
    centre, terms = _centre_terms(seeds, rows, mu, w, tau, lo, hi)
    for _ in range(ZOOMS):
        # The integrand is log-concave in the centre: where it is worth more than e^-40 of its peak
        # is one run of nodes. Fewer than ZOOM_NODES nodes there (many seeds: a narrow peak): the
        # nodes are laid again over that run and one node beyond each end.
        near = (terms - np.log(_GL_W)[None]) > (terms - np.log(_GL_W)[None]).max(axis=1, keepdims=True) - 40
        narrow = near.sum(axis=1) < ZOOM_NODES
        if not narrow.any():
            break
        first = np.maximum(near.argmax(axis=1) - 1, 0)[narrow]
        last = np.minimum(LEGENDRE_NODES - near[:, ::-1].argmax(axis=1), LEGENDRE_NODES - 1)[narrow]
        picked = rows[narrow]
        new_lo = np.where(first == 0, lo[picked], centre[narrow, first])
        new_hi = np.where(last == LEGENDRE_NODES - 1, hi[picked], centre[narrow, last])
        lo[picked], hi[picked] = new_lo, new_hi
        centre[narrow], terms[narrow] = _centre_terms(seeds, picked, mu, w, tau, new_lo, new_hi)
    top = terms.max(axis=1)
    return -float(np.sum(top + np.log(np.exp(terms - top[:, None]).sum(axis=1))))


def _minimize(seeds: _Seeds, z0, fixed: dict | None = None, starts=None) -> tuple[float, np.ndarray]:
    """(minimal negative log-likelihood, θ = (c, s, log σ, τ)) with the parameters in `fixed`
    ({index: value}) held; from each start in `starts` (θ's), the best kept."""
    finite = np.concatenate([seeds.a[np.isfinite(seeds.a)], seeds.b[np.isfinite(seeds.b)]])
    starts = starts if starts is not None else [np.array([float(np.median(finite)), s0, math.log(0.3), 0.1])
                                                for s0 in (0.0, -1.0)]
    bounds = [(None, None), (None, None), (math.log(W_MIN), math.log(W_MAX)), (0.0, TAU_MAX)]
    return _least(lambda theta: _nll(theta, seeds, z0), bounds, fixed or {}, starts)


def _least(objective, bounds: list, fixed: dict, starts) -> tuple[float, np.ndarray]:
    """(the least value of `objective` found, its argument) from each start (L-BFGS-B within
    `bounds`), the parameters in `fixed` ({index: value}) held."""
    free = [i for i in range(len(bounds)) if i not in fixed]
    best = (math.inf, None)
    for start in starts:
        start = np.array(start, float)
        for i, v in fixed.items():
            start[i] = v
        if not free:
            value = objective(start)
            best = min(best, (value, start), key=lambda t: t[0])
            continue

        def f(free_values):
            theta = start.copy()
            theta[free] = free_values
            return objective(theta)

        r = minimize(f, start[free], method="L-BFGS-B", bounds=[bounds[i] for i in free])
        if r.fun < best[0]:
            theta = start.copy()
            theta[free] = r.x
            best = (float(r.fun), theta)
    return best


def _profile_starts(theta: np.ndarray, tau_index: int | None) -> list[np.ndarray]:
    """The starts a profile point is refitted from: the best fit θ̂ and, where τ is free
    (`tau_index` not None), θ̂ with τ set to each of TAU_STARTS. Why: below TAU_ZERO the
    likelihood does not depend on τ, so from τ̂ = 0 the numerical gradient in τ is zero and τ
    never leaves 0 — the profile would be the τ = 0 one, narrower than the documented interval."""
    starts = [theta]
    if tau_index is not None:
        for tau in TAU_STARTS:
            start = np.array(theta, float)
            start[tau_index] = tau
            starts.append(start)
    return starts


def _profile_interval(refit, index: int, nll_min: float, theta: np.ndarray, threshold: float,
                      tau_index: int | None = None) -> tuple[float, float]:
    """The 95 % profile-likelihood interval of parameter `index`: where twice the drop stays
    under `threshold` (see the section's comment). refit(fixed, starts) -> (least negative
    log-likelihood, θ) with the parameters in `fixed` held; each profile point is refitted from
    `_profile_starts` (τ̂ and a positive τ where `tau_index`, τ's place in θ, is free)."""
    if not math.isfinite(threshold):
        return -math.inf, math.inf
    starts = _profile_starts(theta, tau_index)

    def excess(v):
        return 2 * (refit({index: v}, starts)[0] - nll_min) - threshold

    edges = []
    for sign in (-1, 1):
        step, inside = 0.25, theta[index]
        while True:
            v = theta[index] + sign * step
            if excess(v) > 0:
                edges.append(brentq(excess, *sorted((inside, v)), xtol=1e-3))
                break
            inside, step = v, step * 2
            if step > PROFILE_SPAN:
                edges.append(sign * math.inf)
                break
    return edges[0], edges[1]


def likelihood_fit(lows, highs, z, at_depths=(), intervals: bool = True, scatter: bool = True) -> dict:
    """The interval-censored fit of one line (see the section's comment): slope, its profile
    interval, the seeds' scatter σ ("width"), the depths' scatter τ ("depth_scatter"), the
    seed-limits and depths used, and per depth in `at_depths` (blocks) the law's 50 % limit
    exp(μ(L)) with its profile interval, {L: (limit, low, high)}. `scatter=False`: without the
    depth term (τ = 0), χ²₁ intervals. NaN with fewer than two depths or no finite bracket end."""
    a, b, z = (np.asarray(v, float) for v in (lows, highs, z))
    out = {"runs": len(a), "depths": len(set(z.tolist())), "slope": math.nan, "slope_low": math.nan,
           "slope_high": math.nan, "width": math.nan, "depth_scatter": math.nan, "limits": {}}
    if out["depths"] < 2 or not np.isfinite(b).any() or not np.isfinite(a).any():
        return out
    seeds, z0 = _Seeds(a, b, z), float(np.mean(z))
    fixed = {} if scatter else {3: 0.0}
    threshold = drop_threshold(out["depths"]) if scatter else CHI2_95
    nll, theta = _minimize(seeds, z0, fixed)
    out.update(slope=float(theta[1]), width=float(math.exp(theta[2])), depth_scatter=float(theta[3]))
    if intervals:
        out["slope_low"], out["slope_high"] = _profile_interval(
            lambda held, starts: _minimize(seeds, z0, {**fixed, **held}, starts), 1, nll, theta, threshold,
            tau_index=3 if scatter else None)
    for depth in at_depths:
        zd = math.log(depth)
        shifted = theta + np.array([theta[1] * (zd - z0), 0, 0, 0])   # the same fit, its intercept at depth L
        low, high = (_profile_interval(lambda held, starts: _minimize(seeds, zd, {**fixed, **held}, starts),
                                       0, nll, shifted, threshold, tau_index=3 if scatter else None)
                     if intervals else (math.nan,) * 2)
        out["limits"][depth] = (math.exp(shifted[0]), math.exp(low), math.exp(high))
    return out


def slope_inside(lows, highs, z, slope: float, scatter: bool = True) -> bool | None:
    """Whether `slope` lies inside likelihood_fit's 95 % slope interval, by the test the interval
    inverts (twice the profile drop at `slope` under the threshold), without searching the
    interval's edges: one profile fit instead of a dozen. None where the fit gives no slope."""
    a, b, z = (np.asarray(v, float) for v in (lows, highs, z))
    depths = len(set(z.tolist()))
    if depths < 2 or not np.isfinite(b).any() or not np.isfinite(a).any():
        return None
    seeds, z0 = _Seeds(a, b, z), float(np.mean(z))
    fixed = {} if scatter else {3: 0.0}
    nll, theta = _minimize(seeds, z0, fixed)
    threshold = drop_threshold(depths) if scatter else CHI2_95
    if not math.isfinite(threshold):
        return True
    # the profile at `slope` is the least over the starts: inside as soon as one start's fit is
    # under the threshold (the same answer as refitting from all of them, at the cost of one fit mostly)
    for start in _profile_starts(theta, 3 if scatter else None):
        if 2 * (_minimize(seeds, z0, {**fixed, 1: slope}, starts=[start])[0] - nll) <= threshold:
            return True
    return False


def slope_difference(line_a, line_b, scatter: bool = True) -> dict:
    """Line b's slope minus line a's, each line (lows, highs, log depths) as upper_side gives
    them: one fit of both lines, each with its own law and seeds' scatter σ, one depth scatter τ
    for both (`scatter=False`: none, χ²₁), the difference profiled with the threshold of
    J = both lines' depths and 4 coefficients (see the section's comment). {"difference", "low",
    "high", "depths" (a's, b's), "depth_scatter"}; NaN where a line has no slope."""
    out = {"difference": math.nan, "low": math.nan, "high": math.nan, "depth_scatter": math.nan,
           "depths": tuple(len(set(np.asarray(line[2], float).tolist())) for line in (line_a, line_b))}
    if any(not math.isfinite(likelihood_fit(*line, intervals=False, scatter=False)["slope"])
           for line in (line_a, line_b)):
        return out
    seeds = [_Seeds(*(np.asarray(v, float) for v in line)) for line in (line_a, line_b)]
    z0 = [float(np.mean(np.asarray(line[2], float))) for line in (line_a, line_b)]

    def nll(phi):   # φ = (c_a, s_a, log σ_a, c_b, s_b − s_a, log σ_b, τ)
        return (_nll((phi[0], phi[1], phi[2], phi[6]), seeds[0], z0[0])
                + _nll((phi[3], phi[1] + phi[4], phi[5], phi[6]), seeds[1], z0[1]))

    w_bounds = (math.log(W_MIN), math.log(W_MAX))
    bounds = [(None, None), (None, None), w_bounds, (None, None), (None, None), w_bounds, (0.0, TAU_MAX)]
    fixed = {} if scatter else {6: 0.0}
    ta, tb = (_minimize(one, z, {3: 0.0})[1] for one, z in zip(seeds, z0))   # each line alone, no τ
    start = [np.array([ta[0], ta[1], ta[2], tb[0], tb[1] - ta[1], tb[2], tau]) for tau in (0.0, 0.1)]
    least, phi = _least(nll, bounds, fixed, start)
    threshold = drop_threshold(sum(out["depths"]), 4) if scatter else CHI2_95
    out.update(difference=float(phi[4]), depth_scatter=float(phi[6]))
    out["low"], out["high"] = _profile_interval(lambda held, starts: _least(nll, bounds, {**fixed, **held}, starts),
                                                4, least, phi, threshold, tau_index=6 if scatter else None)
    return out

# ------------------------------------------------------------ the optimal lr (lowest mean loss)
#
# Per setting (line × depth): the lr of the lowest mean final loss over seeds (a run's loss
# clipped at its initial loss ℓ₀, as in the LR sensitivity). Between grid points it is the
# vertex of the parabola in log lr through the best mean and its two neighbours; at the edge
# of the lrs tried it is censored ("≤ smallest lr" / "≥ largest lr") and not placed. Its 95 %
# interval is the bracket of the lrs that could be the best (multiple comparisons with the
# best, after Hsu): an lr is kept unless its mean exceeds another lr's by more than
# t·σ̂·√(1/nᵢ + 1/nⱼ), σ̂ pooled over every lr's seeds (df = Σ(n − 1)), t the one-sided Student
# quantile at OPT_ALPHA/(k − 1) (Bonferroni over the k − 1 comparisons with the best). With
# probability ≥ 95 % the grid's truly best lr is kept, and for a loss that falls and then rises
# in log lr the optimum lies within one lr step of that lr: so the interval runs from the lr
# below the lowest kept lr to the lr above the highest kept one (0 / ∞ where that is past the
# lrs tried). It assumes nothing of the curve's shape beyond its one minimum; seeds shared
# between lrs (a seed low at every lr) only make it wider than needed. Why not the parabola's
# parametric bootstrap used before issue 57: where the loss rises more steeply on one side its
# vertex is biased and that interval covered 0.725 (docs/results/methods). Its slope against
# depth: least squares through the placed optima, a t-interval with n − 2 degrees of freedom
# (3 depths at least). Coverage: docs/results/methods.

OPT_ALPHA = 0.05
OPTIMUM_INTERVAL = ("from the lr below the lowest to the lr above the highest lr that could be the best "
                    "(multiple comparisons with the best, seeds' spread pooled over the lrs; 0 / ∞ where that passes "
                    "the lrs tried)")


def _vertex(xs: np.ndarray, means: np.ndarray) -> np.ndarray:
    """Vertex (log lr) of the parabola through the best of `means` (…, n_lr) and its two
    neighbours, per row; the edge lr where the best is at an edge."""
    best = np.argmin(means, axis=-1)
    i = np.clip(best, 1, len(xs) - 2)
    rows = np.arange(means.shape[0])
    x0, x1, x2 = xs[i - 1], xs[i], xs[i + 1]
    y0, y1, y2 = means[rows, i - 1], means[rows, i], means[rows, i + 1]
    num = (x1 - x0) ** 2 * (y1 - y2) - (x1 - x2) ** 2 * (y1 - y0)
    den = (x1 - x0) * (y1 - y2) - (x1 - x2) * (y1 - y0)
    with np.errstate(divide="ignore", invalid="ignore"):
        v = x1 - 0.5 * num / den
    v = np.where(np.isfinite(v), np.clip(v, x0, x2), x1)
    return np.where((best == 0) | (best == len(xs) - 1), xs[best], v)


def could_be_best(vals: list[np.ndarray], alpha: float = OPT_ALPHA) -> np.ndarray | None:
    """Which lrs (each an array of its seeds' losses) could be the best at level `alpha`: the
    multiple comparisons with the best of the section's comment, a boolean per lr; None where no
    lr has two seeds (no spread to compare with)."""
    n = np.array([len(v) for v in vals], float)
    df = int(sum(len(v) - 1 for v in vals))
    if df < 1 or len(vals) < 2:
        return None
    means = np.array([v.mean() for v in vals])
    sigma = math.sqrt(sum(((v - v.mean()) ** 2).sum() for v in vals) / df)
    t = float(stdtrit(df, 1 - alpha / (len(vals) - 1)))
    margin = t * sigma * np.sqrt(1 / n[:, None] + 1 / n[None, :])
    worse = means[:, None] - means[None, :] > margin      # [i, j]: lr i beaten by lr j
    return ~worse.any(axis=1)


def optimum(cells: dict, alpha: float = OPT_ALPHA) -> dict:
    """The optimal lr of one setting from {lr: [clipped loss of each seed]}: {"lr", "low",
    "high", "kind" (optimum / ≤ / ≥ / none), "best_grid_lr", "n_lrs"}; lr is NaN unless kind
    is "optimum"; low/high: the interval of the section's comment (0 / ∞ where it opens past the
    lrs tried), NaN without a seed spread to compare with."""
    lrs = sorted(lr for lr, v in cells.items() if len(v))
    out = {"lr": math.nan, "low": math.nan, "high": math.nan, "kind": "none", "best_grid_lr": math.nan,
           "n_lrs": len(lrs)}
    if not lrs:
        return out
    xs = np.log(np.asarray(lrs, float))
    vals = [np.asarray(cells[lr], float) for lr in lrs]
    means = np.array([v.mean() for v in vals])
    best = int(np.argmin(means))
    out["best_grid_lr"] = lrs[best]
    if len(lrs) < 3 or best in (0, len(lrs) - 1):
        out["kind"] = "≤" if best == 0 else "≥"
        return out
    out.update(kind="optimum", lr=float(math.exp(_vertex(xs, means[None])[0])))
    kept = could_be_best(vals, alpha)
    if kept is None:
        return out
    first, last = int(np.argmax(kept)), len(kept) - 1 - int(np.argmax(kept[::-1]))
    out.update(low=float(lrs[first - 1]) if first > 0 else 0.0,
               high=float(lrs[last + 1]) if last + 1 < len(lrs) else math.inf)
    return out


def optimum_slope(depths, opt_lrs) -> tuple[float, float, float]:
    """(slope, low, high) of log optimal lr against log depth: least squares, 95 % t-interval
    (n − 2 degrees of freedom); NaN with fewer than 3 depths."""
    d = [(math.log(L), math.log(v)) for L, v in zip(depths, opt_lrs) if v and math.isfinite(v)]
    if len({a for a, _ in d}) < 3:
        return math.nan, math.nan, math.nan
    r = stats.linregress(*zip(*d))
    half = stats.t.ppf(0.975, len(d) - 2) * r.stderr
    return float(r.slope), float(r.slope - half), float(r.slope + half)


def _value_key(v) -> str:
    """A setting value as one string for matching a CSV cell to a run's config (0.00173, 16, pre)."""
    try:
        return f"{float(v):g}"
    except (TypeError, ValueError):
        return str(v)


def with_losses(points, runs, columns: list[str]):
    """boundary_points rows with a `loss` column: each run's final loss clipped at its initial
    loss ℓ₀ (a diverged run: ℓ₀), matched on `columns` (line columns, layers, lr) and seed to the
    run folders in `runs` (a config group by its option: placement -> placement.name). Points
    that already carry a loss (or final_val_loss) column keep it; unmatched points get NaN."""
    if "loss" in points.columns:
        return points
    points = points.copy()
    if "final_val_loss" in points.columns:
        points["loss"] = points["final_val_loss"].astype(float)
        return points
    def config_value(r, c):
        return r.config.get(c, r.config.get(f"{c}.name"))

    # {point: {steps: loss}}: a budget check reran the same lr and seed at N× the steps, so a
    # point's own run is the one with the fewest steps (steps_factor 1) or the most (N).
    losses: dict[tuple, dict[int, float]] = {}
    for r in study.screen(list(runs or [])).kept:  # the replicates the statistics use, no left-out run
        v = study.run_loss(r)
        if v is None:
            continue
        l0 = r.summary.get("initial_loss")
        v = min(v, l0) if l0 is not None and math.isfinite(l0) else v
        key = tuple(_value_key(config_value(r, c)) for c in [*columns, "seed"])
        losses.setdefault(key, {})[int(r.config.get("steps") or 0)] = v

    def loss_of(row) -> float:
        by_steps = losses.get(tuple(_value_key(row[c]) for c in [*columns, "seed"]))
        if not by_steps:
            return math.nan
        factor = int(row.get("steps_factor", 1) or 1)
        return by_steps[min(by_steps) if factor == 1 else max(by_steps)]

    points["loss"] = [loss_of(row) for row in points.to_dict("records")]
    return points
