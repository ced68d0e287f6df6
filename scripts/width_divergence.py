"""Where each width-study variant starts to diverge, from one or more `runs.csv` files written
by `normexp report` (the committed grid and a finer grid run later merge into one lr axis).

    python scripts/width_divergence.py docs/results/width_proxies/runs.csv runs/width_x15/runs.csv \
        --out docs/results/width_proxies/width_divergence.csv

Per line (qk_norm, z_loss, d_model) and its lrs in order: how many seeds diverged at each
(`status` "diverged", the report's meaning of the word), the highest lr below which no seed
diverged anywhere ("last calm lr"), the lowest lr where some seed diverged ("first diverging lr"),
their ratio (the bracket's width), the lowest lr where every seed diverged, the mean final
validation loss with a 95 % t-interval over seeds at the last calm lr, and the highest lr at
which every seed learned (`outcome` "learned": ended below the unigram baseline by the report's
margin). Left-out runs are dropped.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pandas as pd

from normexp.analysis import study

LINES = ["qk_norm", "z_loss", "d_model"]


def divergence_table(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per line: the divergence bracket on the merged lr grid (see the module's text)."""
    if "left_out" in runs.columns:
        runs = runs[runs["left_out"].isna()]
    rows = []
    for key, at in runs.groupby(LINES, sort=True):
        by_lr = sorted(at.groupby(at["lr"].astype(float)), key=lambda kv: kv[0])
        counts = [(lr, int((g["status"] == "diverged").sum()), len(g)) for lr, g in by_lr]
        first = next((i for i, (_, d, _) in enumerate(counts) if d), None)
        calm = counts[first - 1][0] if first else (counts[-1][0] if first is None else math.nan)
        first_lr = counts[first][0] if first is not None else math.nan
        all_lr = next((lr for lr, d, n in counts if d == n), math.nan)
        learned = [lr for lr, g in by_lr if (g["outcome"] == "learned").all()]
        loss = math.nan, math.nan, math.nan
        if not math.isnan(calm):
            loss = study.t_interval(dict(by_lr)[calm]["final_val_loss"])
        rows.append({**dict(zip(LINES, key)),
                     "lrs": " ".join(f"{lr:g}" for lr, _, _ in counts),
                     "diverged_of_seeds": " ".join(f"{d}/{n}" for _, d, n in counts),
                     "last_calm_lr": calm, "first_diverging_lr": first_lr,
                     "bracket_ratio": first_lr / calm if calm and not math.isnan(calm) else math.nan,
                     "all_seeds_diverged_from": all_lr,
                     "loss_at_last_calm": loss[0], "loss_at_last_calm_low": loss[1],
                     "loss_at_last_calm_high": loss[2],
                     "highest_lr_every_seed_learned": max(learned) if learned else math.nan})
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs_csv", nargs="+", type=Path, help="runs.csv files of one width study")
    parser.add_argument("--out", type=Path, help="write the table here (CSV); printed otherwise")
    args = parser.parse_args()
    missing = [str(p) for p in args.runs_csv if not p.is_file()]
    if missing:
        raise SystemExit(f"no such file: {', '.join(missing)}; pass the runs.csv that `normexp report` wrote")
    runs = pd.concat([pd.read_csv(p, dtype={"qk_norm": str}) for p in args.runs_csv], ignore_index=True)
    table = divergence_table(runs)
    if args.out:
        table.to_csv(args.out, index=False)
        print(f"wrote {args.out} ({len(table)} lines)")
    else:
        print(table.to_string(index=False))


if __name__ == "__main__":
    main()
