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
"""

from __future__ import annotations

import math

import numpy as np

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


def laws(table, line_cols: list[str]) -> list[dict]:
    """One dict per line (placement × init ...): its depths by kind and the fit (see `fit`)."""
    out = []
    for key, rows in table.groupby(line_cols, sort=True) if line_cols else [((), table)]:
        key = key if isinstance(key, tuple) else (key,)
        rows = rows.sort_values("layers").to_dict("records")
        limits = [r for r in rows if depth_kind(r) == "limit"]
        law = fit([r["layers"] for r in limits], [r["last_stable"] for r in limits],
                  [r["first_unstable"] for r in limits])
        shallow = limits[0] if limits else None
        out.append({"line": key, "rows": rows, **law,
                    "shallowest": shallow and (int(shallow["layers"]), float(shallow["last_stable"]),
                                               float(shallow["first_unstable"])),
                    "not_limits": [(int(r["layers"]), depth_kind(r), str(r.get("upper_edge", ""))) for r in rows
                                   if depth_kind(r) != "limit"]})
    return out


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
    return head, rows


def draw(results: list[dict], line_cols: list[str], path, save) -> None:
    """max stable lr vs depth, log-log: each bracket an error bar around its geometric middle,
    the fitted line dashed (to 1,000 blocks); ▲ = at least (the search's upper bound learned),
    ✕ on the axis = no limit found (nothing learned, or no window)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
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
        for row in r["rows"]:
            kind = depth_kind(row)
            if kind == "at least":
                ax.plot(row["layers"], row["last_stable"], "^", color=color, ms=7, mfc="none")
            elif kind == "none":
                ax.plot(row["layers"], 0, "x", color=color, ms=7, transform=ax.get_xaxis_transform(), clip_on=False)
            data.append({**dict(zip(line_cols, r["line"])), "layers": row["layers"], "kind": kind,
                         "last_stable": row["last_stable"], "first_unstable": row["first_unstable"],
                         "upper_edge": row.get("upper_edge")})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("depth (blocks)")
    ax.set_ylabel("max stable lr (bracket: last stable .. first unstable)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    ax.set_title("Depth law: dashed = fit (to 1,000 blocks); ▲ at least (upper bound learned);\n"
                 "✕ on the axis = no limit at that depth (nothing learned, or no window)", fontsize=8)
    import pandas as pd

    save(fig, path, pd.DataFrame(data))
