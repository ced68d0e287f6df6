"""The optimal-lr slope against depth with a seed bootstrap that keeps each seed's runs together.

    python scripts/optimum_seed_bootstrap.py docs/results/depth_transfer/grid_x14/runs.csv \
        [--out docs/results/depth_transfer/grid_x14/optimum_seed_bootstrap.csv]

The report's interval for one depth's optimal lr (depth_law.optimum) redraws each lr's mean
loss independently. In a grid where every lr ran the same seeds, a seed that ends low ends low at
every lr, so most of the seed-to-seed spread shifts the whole loss curve and leaves its vertex
where it is; drawn independently per lr, that spread moves the vertex, and the interval comes
out wider than the data allow. Here the seeds are resampled with replacement, each drawn seed
bringing its losses at every lr and (`joint`) every depth, the vertex of each depth's mean curve
recomputed (depth_law._vertex: the parabola in log lr through the best mean and its neighbours),
and the least-squares slope of log vertex against log depth refitted; percentiles of the draws.
The line's point estimate is the report's (`optimal lr slope` in transfer_slopes.csv). Seed
resampling with 5 seeds is coarse (it has no more spread than 5 distinct seeds give): read it
beside the report's t-interval over depths, not instead of it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from normexp.analysis import depth_law

SAMPLES, SEED = 4000, 0


def loss_table(runs: pd.DataFrame) -> tuple[list, list, np.ndarray]:
    """(depths, lrs, losses[depth, lr, seed]) of one line; NaN where a run is missing."""
    depths, lrs, seeds = (sorted(runs[c].unique()) for c in ("layers", "lr", "seed"))
    losses = np.full((len(depths), len(lrs), len(seeds)), np.nan)
    for r in runs.itertuples():
        losses[depths.index(r.layers), lrs.index(r.lr), seeds.index(r.seed)] = r.final_val_loss
    return depths, lrs, losses


def slope_of(depths, lrs, mean_losses: np.ndarray) -> np.ndarray:
    """Least-squares slope of log vertex against log depth, for each row of mean_losses[..., depth, lr]."""
    x = np.log(np.asarray(lrs, float))
    vertices = np.stack([depth_law._vertex(x, mean_losses[..., i, :].reshape(-1, len(lrs)))
                         for i in range(len(depths))], axis=-1)
    d = np.log(np.asarray(depths, float))
    d = d - d.mean()
    return (vertices - vertices.mean(-1, keepdims=True)) @ d / (d @ d)


def seed_bootstrap(runs: pd.DataFrame, samples: int = SAMPLES, seed: int = SEED) -> dict:
    """The slope of one line (its runs.csv rows) and its 95 % seed-bootstrap interval."""
    depths, lrs, losses = loss_table(runs)
    if np.isnan(losses).any():
        raise SystemExit("a (depth, lr, seed) run is missing: the seed bootstrap needs the full grid")
    n_seeds = losses.shape[-1]
    point = float(slope_of(depths, lrs, losses.mean(-1)[None])[0])
    picks = np.random.default_rng(seed).integers(0, n_seeds, size=(samples, n_seeds))
    draws = slope_of(depths, lrs, losses[..., picks].mean(-1).transpose(2, 0, 1))
    low, high = np.percentile(draws, [2.5, 97.5])
    return {"depths": " ".join(str(d) for d in depths), "lrs": len(lrs), "seeds": n_seeds, "slope": point,
            "seed_bootstrap_low": float(low), "seed_bootstrap_high": float(high), "samples": samples}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs_csv", type=Path, help="runs.csv of a depth-transfer grid")
    parser.add_argument("--out", type=Path, help="write the table here (CSV); printed otherwise")
    args = parser.parse_args()
    if not args.runs_csv.is_file():
        raise SystemExit(f"no such file: {args.runs_csv}; pass the runs.csv that `normexp report` wrote")
    runs = pd.read_csv(args.runs_csv)
    runs = runs[runs["left_out"].isna()] if "left_out" in runs.columns else runs
    exponent = runs["placement.exponent"].map(lambda v: "-" if pd.isna(v) else f"{v:g}") \
        if "placement.exponent" in runs.columns else pd.Series("-", index=runs.index)
    rows = [{"placement": p, "placement.exponent": e, **seed_bootstrap(g)}
            for (p, e), g in runs.groupby([runs["placement"], exponent], sort=True)]
    table = pd.DataFrame(rows)
    if args.out:
        table.to_csv(args.out, index=False)
        print(f"wrote {args.out} ({len(table)} lines)")
    else:
        print(table.to_string(index=False))


if __name__ == "__main__":
    main()
