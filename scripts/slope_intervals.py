"""The likelihood slopes of the committed depth-law and depth-transfer results, with the depth
scatter term (the report's interval now) beside the seeds-only interval (the one the pages print),
and DeepNorm's slope minus Post-LN's under the same init.

    PYTHONPATH=$PWD python scripts/slope_intervals.py [--out slope_intervals.csv]

Per line: the depths fitted (as `normexp report` picks them: depth_law.likelihood_inputs — depths
where no seed learned or whose edge is too slow for the budget left out), the slope with the
depth scatter term, its 95 % interval (depth_law.likelihood_fit), τ̂ and σ̂, and the seeds-only
fit's slope and interval (scatter=False). The difference: depth_law.slope_difference, both lines
in one fit, each at its own fitted depths, one depth scatter τ for both. The depth-transfer
points come from its runs.csv (a run learned where its outcome is "learned"; left-out runs
dropped), the depth-law ones from each sweep's boundary.csv and boundary_points.csv.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import pandas as pd

from normexp.analysis import depth_law
from normexp.analysis.boundary import RESULT_COLUMNS, at_search_budget

ROOT = Path(__file__).resolve().parents[1]
LAW = ROOT / "docs/results/depth_law"
SWEEPS = {   # the page's section: the sweep folders its table reads
    "depth_law, 800 steps": ["issue39_800/post_deepnorm_shallow_800", "issue39_800/post_deepnorm_mid_800"],
    "depth_law, 200 steps (issue 39 search)": ["issue39/post_deepnorm_shallow", "issue39/post_deepnorm_deep"],
    "depth_law, 200 steps Pre-LN/Sandwich (issue 39 search)": ["issue39/pre_sandwich_shallow"],
    "depth_law, 200 steps (first search)": ["post_deepnorm", "pre_sandwich"],
}
TRANSFER = ROOT / "docs/results/depth_transfer/runs.csv"
CONTRASTS = (("depth_law, 800 steps", ("post", "xavier"), ("deepnorm", "xavier")),
             ("depth_law, 800 steps", ("post", "torchscale"), ("deepnorm", "xavier")),
             ("depth_transfer, 400 steps", ("post", "-"), ("deepnorm", "-")))


def sweep_lines(folders: list[str]) -> dict[tuple, tuple]:
    """{line key: ((lows, highs, log depths), [(depth, why left out)])} of the sweeps in `folders`."""
    table = pd.concat([pd.read_csv(LAW / f / "boundary.csv") for f in folders], ignore_index=True)
    points = pd.concat([pd.read_csv(LAW / f / "boundary_points.csv") for f in folders], ignore_index=True)
    cols = [c for c in table.columns if c not in RESULT_COLUMNS and c != "layers"]
    out = {}
    for key, rows in table.groupby(cols, sort=True):
        mine = points
        for c, v in zip(cols, key):
            mine = mine[mine[c].astype(str) == str(v)]
        out[tuple(map(str, key))] = depth_law.likelihood_inputs(rows.to_dict("records"), at_search_budget(mine))
    return out


def transfer_lines() -> dict[tuple, tuple]:
    """The depth-transfer grid's lines as sweep_lines gives them (its edges: transfer.edges)."""
    runs = pd.read_csv(TRANSFER)
    runs = runs[runs["left_out"].isna()]
    runs["placement.exponent"] = runs["placement.exponent"].map(lambda v: "-" if pd.isna(v) else f"{v:g}")
    runs["learned"] = (runs["outcome"] == "learned").map({True: "yes", False: "no"})
    out = {}
    for key, mine in runs.groupby(["placement", "placement.exponent"], sort=True):
        out[tuple(map(str, key))] = depth_law.likelihood_inputs([], mine[["layers", "lr", "seed", "learned"]])
    return out


def interval(v, low, high) -> str:
    return "-" if not math.isfinite(v) else f"{v:.2f} [{low:.2f}, {high:.2f}]"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="also write the table as CSV here")
    args = p.parse_args()
    t0 = time.time()
    studies = {name: sweep_lines(folders) for name, folders in SWEEPS.items()}
    studies["depth_transfer, 400 steps"] = transfer_lines()
    rows = []
    for name, lines in studies.items():
        for key, (data, left) in lines.items():
            new = depth_law.likelihood_fit(*data)
            old = depth_law.likelihood_fit(*data, scatter=False)
            depths = sorted({round(math.exp(v)) for v in data[2]})
            rows.append({"study": name, "line": "/".join(key), "depths fitted": "-".join(map(str, depths)) or "-",
                         "left out": "; ".join(f"{d}: {why}" for d, why in left) or "-",
                         "slope, depth scatter [95 %]": interval(new["slope"], new["slope_low"], new["slope_high"]),
                         "τ": f"{new['depth_scatter']:.2f}", "σ": f"{new['width']:.2f}",
                         "slope, seeds only [95 %]": interval(old["slope"], old["slope_low"], old["slope_high"])})
    table = pd.DataFrame(rows)
    with pd.option_context("display.width", 250, "display.max_colwidth", 70, "display.max_rows", 200):
        print(table.to_string(index=False))
    print("\nDeepNorm's slope minus Post-LN's (one fit of both lines; at each line's own fitted depths, then at"
          " the depths both have):")
    for name, a, b in CONTRASTS:
        lines = studies[name]
        own = (lines[a][0], lines[b][0])
        both = set(own[0][2]) & set(own[1][2])
        common = tuple(tuple([v for v, zi in zip(col, line[2]) if zi in both] for col in line) for line in own)
        for label, pair in (("own depths", own), ("common depths", common)):
            for scatter in (True, False):
                d = depth_law.slope_difference(*pair, scatter=scatter)
                depths = [sorted({round(math.exp(v)) for v in line[2]}) for line in pair]
                print(f"  {name}, {label}: {'/'.join(b)} − {'/'.join(a)} = "
                      f"{interval(d['difference'], d['low'], d['high'])} "
                      f"({'depth scatter, τ̂ ' + format(d['depth_scatter'], '.2f') if scatter else 'seeds only, χ²₁'}; "
                      f"depths {'-'.join(map(str, depths[1]))} and {'-'.join(map(str, depths[0]))})")
    if args.out:
        table.to_csv(args.out, index=False)
    print(f"wall time {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
