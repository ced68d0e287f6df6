"""Redraw committed figures from the data committed beside them (the run folders are not
committed), with the report's own drawing functions (normexp/analysis/report/figures.py):

    python scripts/redraw_figures.py docs/results/lr_boundary/grad_norm_layers.csv.gz ...
    python scripts/redraw_figures.py docs/results/depth_law/issue39/val_loss.csv ...

A `<family>_layers.csv.gz` (or `.csv`) redraws `<family>_layers.png` (draw_layer_table: a fixed
1100 × 520 pixels; each run's last-step label names what it came to where a runs.csv beside it
says: its `outcome`, else its `status`). A `val_loss.csv` or `train_loss.csv` redraws its PNG
(draw_curve_table: what that file keeps, each line's mean and interval; the figure says what it
lacks). Each figure is written beside its data; the data file is left as it is.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from normexp.analysis.report.figures import draw_curve_table, draw_layer_table, save_png

USAGE = "usage: redraw_figures.py FILE... (each a <family>_layers.csv[.gz], val_loss.csv or train_loss.csv)"
CURVES = {"val_loss": "validation loss", "train_loss": "train loss"}


def stem(path: Path) -> str:
    """grad_norm_layers for grad_norm_layers.csv.gz and grad_norm_layers.csv."""
    name = path.name
    for suffix in (".gz", ".csv"):
        name = name.removesuffix(suffix)
    return name


def ended_of(folder: Path) -> dict:
    """{run path: what it came to} from the runs.csv beside the data (empty where there is none)."""
    runs_csv = folder / "runs.csv"
    if not runs_csv.is_file():
        return {}
    runs = pd.read_csv(runs_csv, dtype=str, keep_default_na=False)
    words = runs["outcome"] if "outcome" in runs.columns else pd.Series([""] * len(runs))
    status = runs["status"] if "status" in runs.columns else pd.Series([""] * len(runs))
    return {p: w or s for p, w, s in zip(runs["path"], words, status) if w or s}


def redraw(data: Path) -> Path:
    """The figure of one data file, written beside it: the PNG's path."""
    name = stem(data)
    table = pd.read_csv(data)  # pandas reads .gz as it is
    if name.endswith("_layers"):
        fig = draw_layer_table(table, name.removesuffix("_layers"), ended_of(data.parent))
    elif name in CURVES:
        fig = draw_curve_table(table, CURVES[name])
    else:
        raise ValueError(f"{data}: not a per-layer or loss-curve data file")
    png = data.with_name(name + ".png")
    save_png(fig, png)
    return png


def main(args: list[str]) -> int:
    if not args or any(a.startswith("-") for a in args):
        print(USAGE, file=sys.stderr)
        return 2
    for arg in args:
        data = Path(arg)
        png = data.with_name(stem(data) + ".png")
        before = png.stat().st_size if png.is_file() else None
        try:
            redraw(data)
        except (ValueError, OSError, KeyError) as e:
            print(f"redraw_figures: {e}", file=sys.stderr)
            return 1
        print(f"{png}: {before if before is not None else '-'} -> {png.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
