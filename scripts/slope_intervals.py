"""The likelihood slopes of the committed depth-law and depth-transfer results, with the depth
scatter term (the report's interval now) beside the seeds-only interval (the one the report wrote
before), and DeepNorm's slope minus Post-LN's under the same init.

    PYTHONPATH=$PWD python scripts/slope_intervals.py [--out docs/results/depth_law]

Per line: the depths fitted (as `normexp report` picks them: depth_law.likelihood_inputs — depths
where no seed learned or whose edge is too slow for the budget left out), the slope with the
depth scatter term, its 95 % interval (depth_law.likelihood_fit), τ̂ and σ̂, and the seeds-only
fit's slope and interval (scatter=False); for the depth-law sweeps also the same two fits over
the depths whose upper edge is a stability limit only (boundary.row_edge_class). The difference:
depth_law.slope_difference, both lines in one fit, each at its own fitted depths (then at the
depths both have), one depth scatter τ for both. The depth-transfer points come from its
runs.csv (a run learned where its outcome is "learned"; left-out runs dropped), the depth-law
ones from each sweep's boundary.csv and boundary_points.csv.

--out writes likelihood_slopes.csv and slope_differences.csv there: the pages' likelihood slopes
are rendered from them (`slope_markdown`, `contrast_sentence`; tests/analysis/test_slope_pages.py).

Each depth-scatter fit is also done with each seed's limit read by the failure rule per seed
(issue 57; depth_law.seed_rule_side: only that seed's own collapse, divergence or a stall its
×N rerun confirmed caps it; a run that learns at ×N bounds nothing from above): columns
per_seed_* and per_seed_limits_*, and the differences' rows with rule "per seed".

DeepNet's contrast alone, both readings side by side, from any boundary.csv files (new depths
added to a study: give their folders in a glob of their own):

    PYTHONPATH=$PWD python scripts/slope_intervals.py --deepnet 'issue39_800/*/boundary.csv' 'deep_end/boundary.csv' \
        [--out docs/results/depth_law]     # writes deepnet_contrast.csv
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import pandas as pd

from normexp.analysis import depth_law
from normexp.analysis.boundary import RESULT_COLUMNS, at_search_budget, is_stability_limit, row_edge_class
from normexp.analysis.report.sections import read_searches

ROOT = Path(__file__).resolve().parents[1]
LAW = ROOT / "docs/results/depth_law"
SWEEPS = {   # the page's section: the sweep folders its table reads
    "depth_law, 800 steps": ["issue39_800/post_deepnorm_shallow_800", "issue39_800/post_deepnorm_mid_800",
                             "deep_end"],  # Post-LN and DeepNorm under xavier at 32 and 64 blocks (issue 60)
    "depth_law, 200 steps (issue 39 search)": ["issue39/post_deepnorm_shallow", "issue39/post_deepnorm_deep"],
    "depth_law, 200 steps Pre-LN/Sandwich (issue 39 search)": ["issue39/pre_sandwich_shallow"],
    "depth_law, 200 steps (first search)": ["post_deepnorm", "pre_sandwich"],
    "depth_law, 800 steps Pre-LN/Sandwich": ["issue49_800/pre_sandwich_shallow_800", "issue49_800/pre_sandwich_8_800"],
}
TRANSFER = ROOT / "docs/results/depth_transfer/runs.csv"
CONTRASTS = (("depth_law, 800 steps", ("post", "xavier"), ("deepnorm", "xavier")),
             ("depth_law, 800 steps", ("post", "torchscale"), ("deepnorm", "xavier")),
             ("depth_transfer, 400 steps", ("post", "-"), ("deepnorm", "-")))
NAMES = {"post": "Post-LN", "deepnorm": "DeepNorm", "pre": "Pre-LN", "sandwich": "Sandwich",
         "depth_mup/0.5": "Depth-μP α = ½", "depth_mup/1": "CompleteP (α = 1)"}


def sweep_lines(folders: list, per_seed: bool = False) -> dict[tuple, tuple]:
    """{line key: ((lows, highs, log depths), [(depth, why left out)], (the same three over the
    depths whose upper edge is a stability limit))} of the sweeps in `folders` (under LAW, or
    boundary.csv paths). `per_seed`: each seed's limit by the failure rule read per seed
    (depth_law.seed_rule_side: only that seed's collapse, divergence or confirmed stall caps it)."""
    tables = [f if str(f).endswith(".csv") else LAW / f / "boundary.csv" for f in folders]
    table, points = read_searches(tables)  # a sweep's fixed depth filled in
    cols = [c for c in table.columns if c not in RESULT_COLUMNS and c != "layers"]
    out = {}
    for key, rows in table.groupby(cols, sort=True):
        mine = points
        for c, v in zip(cols, key):
            mine = mine[mine[c].astype(str) == str(v)]
        rows = rows.to_dict("records")
        searched = at_search_budget(mine)
        limits = [int(r["layers"]) for r in rows if (c := row_edge_class(r)) is not None and is_stability_limit(c)]
        if per_seed:
            at_limits = depth_law.seed_rule_side(mine[mine["layers"].astype(int).isin(limits)])[:3]
            out[tuple(map(str, key))] = (*depth_law.likelihood_inputs(rows, mine, per_seed=True), at_limits)
            continue
        at_limits = depth_law.upper_side(searched[searched["layers"].astype(int).isin(limits)])[:3]
        out[tuple(map(str, key))] = (*depth_law.likelihood_inputs(rows, searched), at_limits)
    return out


def transfer_lines(per_seed: bool = False) -> dict[tuple, tuple]:
    """The depth-transfer grid's lines as sweep_lines gives them (no budget check, no edge classes;
    `per_seed`: by the failure rule per seed, so only a seed's own collapse or divergence caps it)."""
    runs = pd.read_csv(TRANSFER)
    runs = runs[runs["left_out"].isna()]
    runs["placement.exponent"] = runs["placement.exponent"].map(lambda v: "-" if pd.isna(v) else f"{v:g}")
    runs["learned"] = (runs["outcome"] == "learned").map({True: "yes", False: "no"})
    out = {}
    for key, mine in runs.groupby(["placement", "placement.exponent"], sort=True):
        out[tuple(map(str, key))] = (*depth_law.likelihood_inputs([], mine[["layers", "lr", "seed", "learned", "outcome"]],
                                                                  per_seed=per_seed), None)
    return out


def depths_of(z) -> str:
    return "-".join(str(d) for d in sorted({round(math.exp(v)) for v in z})) or "-"


def fits(prefix: str, data, seeds_only: bool = True) -> dict:
    """Both fits of one line's data as CSV columns named from `prefix` (`seeds_only=False`: the
    fit with the depth scatter term only)."""
    if data is None:
        return {}
    new = depth_law.likelihood_fit(*data)
    out = {f"{prefix}depths": depths_of(data[2]), f"{prefix}slope": new["slope"], f"{prefix}low": new["slope_low"],
           f"{prefix}high": new["slope_high"], f"{prefix}tau": new["depth_scatter"], f"{prefix}sigma": new["width"]}
    if seeds_only:
        old = depth_law.likelihood_fit(*data, scatter=False)
        out.update({f"{prefix}seeds_only_slope": old["slope"], f"{prefix}seeds_only_low": old["slope_low"],
                    f"{prefix}seeds_only_high": old["slope_high"]})
    return out


def slope_rows(studies: dict, per_seed: dict | None = None) -> pd.DataFrame:
    """One row per line; with `per_seed` (the same studies by the failure rule per seed) its
    depth-scatter fits beside, columns per_seed_* and per_seed_limits_*."""
    rows = []
    for name, lines in studies.items():
        for key, (data, left, at_limits) in lines.items():
            row = {"study": name, "line": "/".join(key), "left out": "; ".join(f"{d}: {why}" for d, why in left) or "-",
                   **fits("", data), **fits("limits_", at_limits)}
            if per_seed is not None:
                ps_data, _, ps_limits = per_seed[name][key]
                row.update({**fits("per_seed_", ps_data, seeds_only=False),
                            **fits("per_seed_limits_", ps_limits, seeds_only=False)})
            rows.append(row)
    return pd.DataFrame(rows)


def difference_rows(studies: dict, rule: str = "per depth") -> pd.DataFrame:
    """DeepNorm − Post-LN per CONTRASTS, at each line's own depths and at the depths both have;
    `rule` names how the seeds' limits were read (per depth, or per seed: `sweep_lines`)."""
    rows = []
    for name, a, b in CONTRASTS:
        lines = studies[name]
        own = (lines[a][0], lines[b][0])
        both = set(own[0][2]) & set(own[1][2])
        common = tuple(tuple([v for v, zi in zip(col, line[2]) if zi in both] for col in line) for line in own)
        for depths, pair in (("own depths", own), ("common depths", common)):
            for scatter in (True, False):
                d = depth_law.slope_difference(*pair, scatter=scatter)
                rows.append({"study": name, "rule": rule, "minuend": "/".join(b), "subtrahend": "/".join(a), "depths": depths,
                             "minuend depths": depths_of(pair[1][2]), "subtrahend depths": depths_of(pair[0][2]),
                             "method": "depth scatter" if scatter else "seeds only",
                             "difference": d["difference"], "low": d["low"], "high": d["high"],
                             "tau": d["depth_scatter"]})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------ the pages' words


def number(v: float) -> str:
    return f"{v:.2f}".replace("-", "−")


def interval(v: float, low: float, high: float) -> str:
    """"−0.89 [−5.71, 3.93]"; "−0.20, no interval (2 depths)" where the profile never crosses the
    threshold (2 depths leave no degree of freedom); "–" without a slope."""
    if not math.isfinite(v):
        return "–"
    if not (math.isfinite(low) and math.isfinite(high)):
        return f"{number(v)}, no interval"
    return f"{number(v)} [{number(low)}, {number(high)}]"


def line_name(line: str) -> str:
    placement, _, rest = line.partition("/")
    if line in NAMES:
        return NAMES[line]
    return NAMES.get(placement, placement) + ("" if rest in ("", "-") else f" / {rest}")


def slope_markdown(table: pd.DataFrame, study: str, limits: bool = False) -> str:
    """The likelihood slopes of one study as the page prints them; `limits`: with the fits over
    the stability-limit depths only beside."""
    rows = table[(table["study"] == study) & table["slope"].notna()]
    head = ["line", "depths fitted", "slope, with a depth scatter term [95 %]", "τ̂", "seeds only (before) [95 %]"]
    if limits:
        head += ["stability-limit depths", "their slope, with a depth scatter term [95 %]", "seeds only (before) [95 %]"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for _, r in rows.iterrows():
        cells = [line_name(r["line"]), r["depths"].replace("-", ", "), interval(r["slope"], r["low"], r["high"]), f"{r['tau']:.2f}",
                 interval(r["seeds_only_slope"], r["seeds_only_low"], r["seeds_only_high"])]
        if limits:
            has = isinstance(r.get("limits_depths"), str) and r["limits_depths"] != "-"
            cells += [r["limits_depths"].replace("-", ", ") if has else "none",
                      interval(r["limits_slope"], r["limits_low"], r["limits_high"]) if has else "–",
                      interval(r["limits_seeds_only_slope"], r["limits_seeds_only_low"], r["limits_seeds_only_high"])
                      if has else "–"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def with_tau(r, prefix: str) -> str:
    """"−0.89 [−5.72, 3.94] (0.21)"; "– (no seed capped)" where no seed's limit has an upper bound
    by the rule at two depths (no slope)."""
    if not math.isfinite(r[f"{prefix}slope"]):
        return "– (no seed capped at 2 depths)"
    return f"{interval(r[f'{prefix}slope'], r[f'{prefix}low'], r[f'{prefix}high'])} ({r[f'{prefix}tau']:.2f})"


def per_seed_markdown(table: pd.DataFrame, studies=None) -> str:
    """Every likelihood slope with a depth scatter term by both readings of the seeds' limits (per
    depth: a run that did not learn within the budget caps its seed; per seed: the failure rule,
    only that seed's collapse, divergence or confirmed stall), over the depths fitted and over the
    stability-limit depths only; `studies`: those only (default every one)."""
    head = ["study", "line", "depths fitted", "per depth [95 %]", "per seed [95 %] (τ̂)",
            "stability-limit depths", "per depth [95 %]", "per seed [95 %] (τ̂)"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    chosen = table["study"].isin(studies) if studies is not None else table["study"].notna()
    for _, r in table[chosen & table["slope"].notna()].iterrows():
        has = isinstance(r.get("limits_depths"), str) and r["limits_depths"] != "-"
        cells = [r["study"], line_name(r["line"]), r["depths"].replace("-", ", "), interval(r["slope"], r["low"], r["high"]),
                 with_tau(r, "per_seed_"),
                 r["limits_depths"].replace("-", ", ") if has else "none",
                 interval(r["limits_slope"], r["limits_low"], r["limits_high"]) if has else "–",
                 with_tau(r, "per_seed_limits_") if has else "–"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def words(depths: str) -> str:
    """"2, 4 and 8" from "2-4-8"."""
    parts = depths.split("-")
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _difference(diffs: pd.DataFrame, depths: str, method: str) -> pd.Series:
    if "rule" in diffs.columns:
        diffs = diffs[diffs["rule"] == "per depth"]
    mine = diffs[(diffs["study"] == "depth_law, 800 steps") & (diffs["minuend"] == "deepnorm/xavier")
                 & (diffs["subtrahend"] == "post/xavier") & (diffs["depths"] == depths) & (diffs["method"] == method)]
    return mine.iloc[0]


def contrast_sentence(diffs: pd.DataFrame) -> str:
    """DeepNet's contrast under one init (xavier, 800 steps) in one sentence, from slope_differences.csv."""
    own, common = _difference(diffs, "own depths", "depth scatter"), _difference(diffs, "common depths", "seeds only")
    common_scatter = _difference(diffs, "common depths", "depth scatter")
    bounded = math.isfinite(common_scatter["low"]) and math.isfinite(common_scatter["high"])
    dn, pl = (words(own[c]) for c in ("minuend depths", "subtrahend depths"))
    if own["low"] > 0:
        verdict = (f"over these depths the data show DeepNorm's limit falling more slowly than Post-LN's under the "
                   f"same init")
    elif own["high"] < 0:
        verdict = "over these depths the data show DeepNorm's limit falling faster than Post-LN's under the same init"
    else:
        verdict = "the data do not show DeepNorm's limit falling more slowly than Post-LN's under the same init"
    return (f"Under `init=xavier` at 800 steps DeepNorm's likelihood slope minus Post-LN's is "
            f"{interval(own['difference'], own['low'], own['high'])} (95 %; one fit of both lines with a depth "
            f"scatter term, τ̂ {own['tau']:.2f}; DeepNorm at {dn} blocks, Post-LN at {pl}): {verdict}; at the depths both "
            f"have, {words(common['minuend depths'])} blocks, the difference is "
            f"{interval(common['difference'], common['low'], common['high'])} if depths do not scatter "
            f"(seeds only), and " + ("is " + interval(common_scatter["difference"], common_scatter["low"],
                                                       common_scatter["high"]) if bounded else "has no bound")
            + " if they may.")


def deepnet_contrast(tables: list) -> pd.DataFrame:
    """DeepNorm/xavier's likelihood slope minus Post-LN/xavier's, one fit of both lines, from the
    boundary.csv files `tables` (their boundary_points.csv beside): by both readings of the seeds'
    limits (per depth: a run that did not learn within the budget caps its seed; per seed: only
    that seed's collapse, divergence or confirmed stall), over the depths the fit keeps and over
    the stability-limit depths only, with and without the depth scatter term."""
    rows = []
    for rule, per_seed in (("per depth", False), ("per seed", True)):
        lines = sweep_lines(tables, per_seed=per_seed)
        post, deep = lines[("post", "xavier")], lines[("deepnorm", "xavier")]
        for depths, pair in (("depths fitted", (post[0], deep[0])), ("stability-limit depths", (post[2], deep[2]))):
            for scatter in (True, False):
                d = depth_law.slope_difference(*pair, scatter=scatter)
                rows.append({"rule": rule, "depths": depths, "DeepNorm depths": depths_of(pair[1][2]),
                             "Post-LN depths": depths_of(pair[0][2]),
                             "method": "depth scatter" if scatter else "seeds only",
                             "difference": d["difference"], "low": d["low"], "high": d["high"], "tau": d["depth_scatter"]})
    return pd.DataFrame(rows)


def deepnet_markdown(diffs: pd.DataFrame) -> str:
    """The contrast table as the depth_law page prints it."""
    out = ["| seeds' limits read | depths | DeepNorm at | Post-LN at | with a depth scatter term [95 %] (τ̂) "
           "| seeds only [95 %] |", "|---|---|---|---|---|---|"]
    for (rule, depths), g in diffs.groupby(["rule", "depths"], sort=False):
        s, o = (g[g["method"] == m].iloc[0] for m in ("depth scatter", "seeds only"))
        out.append(f"| {rule} | {depths} | {words(s['DeepNorm depths'])} | {words(s['Post-LN depths'])} | "
                   f"{interval(s['difference'], s['low'], s['high'])} ({s['tau']:.2f}) | "
                   f"{interval(o['difference'], o['low'], o['high'])} |")
    return "\n".join(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="write likelihood_slopes.csv and slope_differences.csv in this folder")
    p.add_argument("--deepnet", metavar="GLOB", nargs="+",
                   help="only DeepNet's contrast (DeepNorm/xavier − Post-LN/xavier), both readings of the seeds' "
                        "limits, from the boundary.csv files matching any GLOB under docs/results/depth_law "
                        "(e.g. 'issue39_800/*/boundary.csv' 'deep_end/boundary.csv'); with --out also "
                        "deepnet_contrast.csv there")
    args = p.parse_args()
    t0 = time.time()
    if args.deepnet:
        tables = sorted({t for pattern in args.deepnet for t in LAW.glob(pattern)})
        if not tables or not all(t.name == "boundary.csv" for t in tables):
            p.exit(2, f"--deepnet {' '.join(args.deepnet)}: matches no boundary.csv under {LAW} (found {len(tables)} files); "
                      f"give a glob of boundary.csv files, e.g. 'issue39_800/*/boundary.csv'\n")
        print("tables: " + ", ".join(str(t.relative_to(LAW)) for t in tables))
        diffs = deepnet_contrast(tables)
        print(deepnet_markdown(diffs))
        if args.out:
            diffs.to_csv(args.out / "deepnet_contrast.csv", index=False)
        print(f"wall time {time.time() - t0:.0f} s")
        return
    studies = {name: sweep_lines(folders) for name, folders in SWEEPS.items()}
    studies["depth_transfer, 400 steps"] = transfer_lines()
    per_seed = {name: sweep_lines(folders, per_seed=True) for name, folders in SWEEPS.items()}
    per_seed["depth_transfer, 400 steps"] = transfer_lines(per_seed=True)
    table = slope_rows(studies, per_seed)
    diffs = pd.concat([difference_rows(studies), difference_rows(per_seed, "per seed")], ignore_index=True)
    with pd.option_context("display.width", 250, "display.max_colwidth", 70, "display.max_rows", 200,
                           "display.max_columns", 40):
        print(table.to_string(index=False))
        print("\nDeepNorm's slope minus Post-LN's (one fit of both lines):")
        print(diffs.to_string(index=False))
    print("\n" + contrast_sentence(diffs))
    if args.out:
        table.to_csv(args.out / "likelihood_slopes.csv", index=False)
        diffs.to_csv(args.out / "slope_differences.csv", index=False)
    print(f"wall time {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
