"""The report's transfer sections: an lr grid crossed with depth (experiment=depth_transfer)
or with width (experiment=width_proxies); the statistics are normexp/analysis/transfer.py's. Each
section returns its report.md lines and writes its tables and figures (each with its .csv) beside."""

from __future__ import annotations

import math
from collections.abc import Collection
from pathlib import Path

import pandas as pd

from ...runs.reading import Run
from .. import depth_law, study, transfer
from ..boundary import FAILURE_RULE, bracket_words
from .figures import pyplot, save_figure
from .registry import Folder, register_section
from .tables import display_name, fmt_param, markdown_table, same_columns, sort_key, text_table

DEPTH_FILES = ["transfer_lrs.csv", "transfer.png", "transfer_edges.csv", "transfer_slopes.csv", "transfer_law.png",
               "transfer_update_rms.png"]
WIDTH_FILES = ["width.csv", "width_sensitivity.png", "width_signals.png"]


def _line_label(line: tuple, lines: list[str]) -> str:
    return ", ".join(f"{display_name(k)}={fmt_param(v)}" for k, v in zip(lines, line) if v != transfer.MISSING) or "all"


def _panels(n: int):
    plt = pyplot()
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.8 * rows), squeeze=False)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    return fig, list(axes.flat)


def plot_curves_per_size(table: pd.DataFrame, lines: list[str], size_key: str, x_key: str, y: str, path: Path,
                         ylabel: str, title: str, log_y: bool = False, log_x: bool = True) -> None:
    """One panel per line, one curve per size (depth or width): `y` against `x_key` (a log axis
    unless log_x is False) with its t-interval (`y`_low/_high, or low/high for the cell table); red x:
    some seed diverged."""
    keyed = table.assign(_line=[tuple(r[k] for k in lines) for r in table.to_dict("records")])
    line_values = list(dict.fromkeys(keyed["_line"]))
    fig, axes = _panels(len(line_values))
    low, high = (f"{y}_low", f"{y}_high") if f"{y}_low" in table.columns else ("low", "high")
    for ax, line in zip(axes, line_values):
        sub = keyed[keyed["_line"] == line]
        for i, (size, cell) in enumerate(sub.groupby(size_key, sort=True)):
            cell = cell.sort_values(x_key)
            yerr = [(cell[y] - cell[low]).fillna(0).clip(lower=0), (cell[high] - cell[y]).fillna(0).clip(lower=0)]
            ax.errorbar(cell[x_key], cell[y], yerr=yerr, marker="o", ms=4, capsize=3, color=f"C{i % 10}",
                        label=f"{display_name(size_key)}={fmt_param(size)}")
            if "n_diverged" in cell.columns:
                div = cell[cell["n_diverged"] > 0]
                ax.plot(div[x_key], div[y], ls="none", marker="x", color="red", ms=9, mew=2)
        if log_x:
            ax.set_xscale("log")
        if log_y:
            ax.set_yscale("log")
        ax.set_title(_line_label(line, lines), fontsize=9)
        ax.set_xlabel({"lr": "learning rate", "position": "relative depth (block + ½)/depth"}.get(x_key, x_key))
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    save_figure(fig, path, table.rename(columns=display_name))


def _bracket(row: dict) -> str:
    """The max lr that learns within the budget, with the failure rule's class of its edge."""
    low, high, edge = row["last_stable"], row["first_unstable"], row["upper_edge"]
    if edge == "nothing learned":
        return "none (nothing learned)"
    if edge == "upper bound":
        return f"≥ {low:.3g} (top of the grid)"
    return f"{low:.3g} .. {high:.3g} ({row.get('edge_class') or edge})"


def _stable(row: dict) -> str:
    """The max stable lr by the failure rule (boundary.stable_bracket over the grid's lrs)."""
    high = row.get("stable_high")
    return bracket_words(row.get("stable_low"), None if high is None or high != high else high,
                         "≥ {:.3g} (no collapse in the grid)")


def _optimum(o: dict | None) -> str:
    if o is None:
        return "-"
    if o["kind"] == "optimum":
        return f"{o['lr']:.3g}" + depth_law.optimum_interval_words(o, "{:.3g}")
    if o["kind"] in ("≤", "≥"):
        return f"{o['kind']} {o['best_grid_lr']:.3g} (grid edge)"
    return o["kind"]


def write_transfer_tables(lines: list[str], edges: pd.DataFrame, results: list[dict], out_dir: Path):
    """transfer_edges.csv, transfer_lrs.csv, transfer_slopes.csv and transfer_law.png from the edges
    table and depth_law.laws' results; returns (head, rows) of the per-depth table and of the slopes."""
    edges.rename(columns=display_name).to_csv(out_dir / "transfer_edges.csv", index=False)
    shown = [display_name(k) for k in lines]
    rows, records = [], []
    for r in results:
        optima = dict(r["optima"])
        for e in r["rows"]:
            o = optima.get(int(e["layers"]))
            rows.append([*(fmt_param(v) for v in r["line"]), str(e["layers"]), _optimum(o), _bracket(e), _stable(e),
                         str(e["lrs"]), str(e["seeds"])])
            records.append({**dict(zip(shown, r["line"])), "layers": e["layers"],
                            "optimal_lr": o["lr"] if o else math.nan, "optimal_lr_low": o["low"] if o else math.nan,
                            "optimal_lr_high": o["high"] if o else math.nan, "optimal_kind": o["kind"] if o else "",
                            "best_grid_lr": o["best_grid_lr"] if o else math.nan, "last_stable": e["last_stable"],
                            "first_failing": e["first_unstable"], "upper_edge": e["upper_edge"],
                            "edge_class": e.get("edge_class", ""), "stable_low": e.get("stable_low", math.nan),
                            "stable_high": e.get("stable_high", math.nan), "lrs": e["lrs"], "seeds": e["seeds"]})
    pd.DataFrame(records).to_csv(out_dir / "transfer_lrs.csv", index=False)
    head = [*shown, "depth", "optimal lr [95 %]", "max lr that learns within the budget (last .. first failing: class)",
            "max stable lr (failure rule)", "lrs", "seeds"]
    slope_head, slope_rows = depth_law.table_rows(results, shown)
    pd.DataFrame([dict(zip(slope_head, row)) for row in slope_rows]).to_csv(out_dir / "transfer_slopes.csv",
                                                                            index=False)
    depth_law.draw(results, shown, out_dir / "transfer_law.png", save_figure)
    return head, rows, slope_head, slope_rows


RULE_FILE = "transfer_rule.csv"


def refresh_depth_transfer(folder: Path, lines: list[str], rewrite: Collection[str] = ()) -> list[Path]:
    """A committed depth-transfer study's transfer_edges.csv and transfer_lrs.csv, transfer_law.png
    and RULE_FILE (the slope table's failure-rule columns) rewritten from its runs.csv alone (the run
    folders are not committed), `lines` its line keys as runs.csv names them. transfer_slopes.csv is
    left as the report wrote it (its likelihood point estimates sit on flat optima that move in their
    last digits with the order the optimizer sees the data) but for its columns named in `rewrite`.
    runs.csv holds no initial loss: a diverged run would enter at its last loss, not ℓ₀, so every
    column the folder's tables already have must come out as it is, to one unit of its last printed
    digit (tables.same_columns), or nothing is written; `rewrite`: columns (of any of the tables)
    whose method changed on purpose, written anew."""
    folder = Path(folder)
    runs = pd.read_csv(folder / "runs.csv", dtype={k: str for k in lines})
    runs = runs[runs["left_out"].isna()] if "left_out" in runs.columns else runs
    points = pd.DataFrame({**{k: runs[k].fillna(transfer.MISSING) for k in lines}, "layers": runs["layers"].astype(int),
                           "lr": runs["lr"].astype(float), "seed": runs["seed"], "outcome": runs["outcome"],
                           "learned": ["yes" if s == "completed" else "no" for s in runs["status"]],
                           "loss": runs["final_val_loss"].astype(float)})
    points = points.sort_values([*lines, "layers", "lr", "seed"], kind="stable", ignore_index=True)  # as grid_points
    edges = transfer.edges(points, lines)
    results = depth_law.laws(edges, lines, points)
    staged = folder / ".refresh"
    staged.mkdir(exist_ok=True)
    names = ["transfer_edges.csv", "transfer_lrs.csv", RULE_FILE, "transfer_law.png", "transfer_law.csv"]
    try:
        _, _, slope_head, slope_rows = write_transfer_tables(lines, edges, results, staged)
        rule = [display_name(k) for k in lines] + depth_law.RULE_HEAD
        pd.DataFrame(slope_rows, columns=slope_head)[rule].to_csv(staged / RULE_FILE, index=False)
        for name in names[:2]:
            same_columns(folder / name, staged / name, rewrite)
        slopes = folder / "transfer_slopes.csv"
        patched = [c for c in rewrite if slopes.is_file() and c in pd.read_csv(slopes, nrows=0).columns]
        if patched:
            old = pd.read_csv(slopes, dtype=str, keep_default_na=False)
            new = pd.DataFrame(slope_rows, columns=slope_head).astype(str)
            if old.iloc[:, :len(lines)].values.tolist() != new.iloc[:, :len(lines)].values.tolist():
                raise ValueError(f"{slopes}: its lines are not the recomputed table's; nothing written")
            old[patched] = new[patched].values
            old.to_csv(staged / "transfer_slopes.csv", index=False)
            names.append("transfer_slopes.csv")
        for name in names:
            (staged / name).replace(folder / name)
    finally:
        for f in staged.iterdir():
            f.unlink()
        staged.rmdir()
    return [folder / n for n in names]


CALM_FILE = "width_calm.csv"


def refresh_width(folder: Path, lines: list[str]) -> Path:
    """CALM_FILE beside a committed width study, from its runs.csv alone: per line (`lines`, as
    runs.csv names them) and width, the LR sensitivity over the lrs at which no seed diverged
    (study.calm_sensitivity; runs.csv's final losses, which at those lrs are the report's, ℓ₀ never
    entering), the lrs used and the lrs left out."""
    folder = Path(folder)
    runs = pd.read_csv(folder / "runs.csv", dtype={k: str for k in lines})
    runs = runs[runs["left_out"].isna()] if "left_out" in runs.columns else runs
    rows = []
    for key, at in runs.groupby([*lines, "d_model"], sort=True):
        by_lr = sorted(at.groupby("lr"), key=lambda kv: float(kv[0]))
        by_seed = [dict(zip(g["seed"], g["final_val_loss"].astype(float))) for _, g in by_lr]
        diverged = [(g["status"] == "diverged").any() for _, g in by_lr]
        point, low, high, used = study.calm_sensitivity(by_seed, diverged)
        rows.append({**dict(zip([*lines, "d_model"], key)), "lr_sensitivity_calm": point,
                     "lr_sensitivity_calm_low": low, "lr_sensitivity_calm_high": high, "n_lrs_calm": used,
                     "lrs_left_out": " ".join(f"{float(lr):g}" for (lr, _), d in zip(by_lr, diverged) if d)})
    pd.DataFrame(rows).to_csv(folder / CALM_FILE, index=False)
    return folder / CALM_FILE


def depth_transfer_section(runs: list[Run], keys: list[str], out_dir: Path, echo) -> list[str]:
    """transfer.png (the classic figure, its cells in transfer.csv), transfer_lrs.csv (per line and
    depth: optimal lr and max stable lr), transfer_edges.csv, transfer_slopes.csv and
    transfer_law.png (depth_law's slope table and figure), transfer_update_rms.png (per-block
    update RMS at the end)."""
    lines, edges, results = transfer.depth_laws(runs, keys)
    cells = study.cell_table(runs, [*lines, "layers", "lr"], sort_key)
    for k in lines:
        cells[k] = cells[k].map(transfer.line_value)
    plot_curves_per_size(cells, lines, "layers", "lr", "mean", out_dir / "transfer.png", "final validation loss",
                         "Loss against lr, one curve per depth: mean final validation loss over seeds, 95 % "
                         "t-interval (diverged = initial loss; red x: some seed diverged)")
    head, rows, slope_head, slope_rows = write_transfer_tables(lines, edges, results, out_dir)
    profiles = transfer.update_rms_profiles(runs, keys)
    lines_md = []
    if len(profiles):
        plot_curves_per_size(profiles, lines, "layers", "position", "mean", out_dir / "transfer_update_rms.png",
                             "update RMS at the last logged step",
                             "Per-block update RMS at the end, at each depth's best grid lr: mean over seeds, 95 % "
                             "t-interval; x = (block + ½)/depth", log_y=True, log_x=False)
        lines_md = ["Per-block update RMS at the end (CompleteP's \"every layer keeps learning\"): the RMS of the "
                    "optimizer's update of each block's matrices at the last logged step, at each depth's best grid "
                    "lr, against the block's relative position. Data: `transfer_update_rms.csv`.", "",
                    "![update RMS per block](transfer_update_rms.png)", ""]
    echo("\nlr transfer across depth (optimal lr and max stable lr per depth):\n" + text_table(head, rows))
    echo("\nslopes against depth:\n" + text_table(slope_head, slope_rows))
    return ["## Does the lr transfer across depth?", "",
            "Per line and depth: the optimal lr (the vertex of the parabola in log lr through the lowest mean "
            "final loss and its neighbours, a run's loss clipped at its initial loss; its 95 % interval "
            + depth_law.OPTIMUM_INTERVAL + "; ≤/≥: the best mean at the grid's edge), the max lr that learns "
            "within the budget (the "
            "largest grid lr at which every seed learned .. the next grid lr, with the failure rule's class of "
            "that edge; top of the grid = learned throughout) and the max stable lr by the failure rule. "
            + FAILURE_RULE + " A grid has no budget check: its stalls are not checked. "
            "Data: `transfer_lrs.csv`, `transfer_edges.csv` (as boundary.csv); the curves' cells: `transfer.csv`.", "",
            markdown_table(head, rows), "",
            "![loss against lr per depth](transfer.png)", "",
            "Slopes against depth (log-log), the depth law's fits (normexp/analysis/depth_law.py): max stable lr, "
            "least squares through the brackets' geometric middles with a bootstrap over brackets and depths, "
            "and the likelihood fit over every seed; optimal lr, least squares through the placed optima with a "
            "t-interval (3 depths at least). A grid bracket is one grid step wide. Data: `transfer_slopes.csv`.", "",
            markdown_table(slope_head, slope_rows), "",
            "![slopes against depth](transfer_law.png)", "", *lines_md]


def grid_left_out(size_key: str, title: str):
    """A transfer section's `left_out`: why `title` is not drawn (an lr grid crossed with `size_key`
    too small for transfer.is_grid), for a folder that is no boundary search; where lr and
    `size_key` both vary, build.transfer_skipped's note says it, with the counts."""
    def why(f: Folder) -> str | None:
        if f.searched or ("lr" in f.keys and size_key in f.keys):
            return None
        lrs, sizes = (len({r.config.get(k) for r in f.runs if r.config.get(k) is not None}) for k in ("lr", size_key))
        return (f"{title} (it needs {transfer.MIN_LRS} lrs or more crossed with {transfer.MIN_SIZES} {size_key} values "
                f"or more; the runs hold {lrs} lr{'s' * (lrs != 1)} and {sizes} {size_key} value{'s' * (sizes != 1)})")
    return why


register_section("depth_transfer", order=50,
                 applies=lambda f: not f.searched and transfer.is_grid(f.runs, f.keys, "layers"),
                 write=lambda f, out_dir, echo: depth_transfer_section(f.runs, f.keys, out_dir, echo),
                 files=tuple(DEPTH_FILES), left_out=grid_left_out("layers", "lr transfer across depth"))


def width_section(runs: list[Run], keys: list[str], out_dir: Path, echo) -> list[str]:
    """width.csv (per variant and width: LR sensitivity, diverged lrs, the instability signals at
    the highest lr that did not diverge), width_sensitivity.png (Wortsman et al.'s Fig. 1) and
    width_signals.png (attention logit and log Z against lr per width)."""
    lines = transfer.line_keys(keys, "d_model")
    table = transfer.width_table(runs, keys, sort_key)
    table.rename(columns=display_name).to_csv(out_dir / "width.csv", index=False)
    _plot_variants(table, lines, out_dir / "width_sensitivity.png")
    signals = transfer.signals_by_lr(runs, keys, sort_key)
    _plot_signals(signals, lines, out_dir / "width_signals.png")

    def interval(row, k, pattern="{:.3g}"):
        v, lo, hi = row[k], row[f"{k}_low"], row[f"{k}_high"]
        if not math.isfinite(v):
            return "-"
        return pattern.format(v) + (f" [{pattern.format(lo)}, {pattern.format(hi)}]" if math.isfinite(lo) else "")

    shown = [display_name(k) for k in lines]
    head = [*shown, "width", "heads", "LR sensitivity [95 %]", "LR sensitivity without the diverged lrs [95 %]",
            "max stable lr", "diverged at lr",
            "highest lr not diverged", "largest attention logit there [95 %]", "output log Z there [95 %]", "n"]
    rows = [[*(fmt_param(r[k]) for k in lines), fmt_param(r["d_model"]), fmt_param(r["heads"]),
             interval(r, "lr_sensitivity", "{:.4f}"),
             interval(r, "lr_sensitivity_calm", "{:.4f}") + f" ({fmt_param(r['n_lrs_calm'])} lrs)",
             "none" if _missing(r["max_stable_lr"]) else fmt_param(r["max_stable_lr"]), r["diverged_lrs"] or "none",
             "-" if _missing(r["highest_calm_lr"]) else f"{r['highest_calm_lr']:g}",
             interval(r, "attn_logit_max"), interval(r, "log_z"), str(r["n"])] for r in table.to_dict("records")]
    echo("\nwidth (LR sensitivity and instability signals per width):\n" + text_table(head, rows))
    return ["## LR sensitivity and instability signals against width", "",
            "Per variant and width: the LR sensitivity (as in the section above, t-interval over seeds), the same over "
            "the lrs at which no seed diverged (a diverged run counts at its initial loss, which can carry most of "
            "the full measure), the lrs at which some seed diverged, and at the highest lr at which none did the largest attention logit "
            "(attn_logit_max, the maximum over blocks at the last logged step) and the output log Z (output/log_z "
            "at the last logged step), mean over seeds with a 95 % t-interval: the two instability signals of "
            "Wortsman et al. 2023 (attention-logit growth, removed by qk-layernorm; output-logit divergence, "
            "removed by z-loss). Data: `width.csv`; against lr: `width_signals.csv`.", "",
            markdown_table(head, rows), "", "![LR sensitivity against width](width_sensitivity.png)", "",
            "![attention logit and log Z against lr](width_signals.png)", ""]


def _missing(v) -> bool:
    return v is None or v != v


def _plot_variants(table: pd.DataFrame, lines: list[str], path: Path) -> None:
    """LR sensitivity against width, one curve per variant (every line key together)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    keyed = table.assign(_line=[_line_label(tuple(r[k] for k in lines), lines) for r in table.to_dict("records")])
    for i, (label, g) in enumerate(keyed.groupby("_line", sort=False)):
        g = g.sort_values("d_model")
        yerr = [(g["lr_sensitivity"] - g["lr_sensitivity_low"]).fillna(0).clip(lower=0),
                (g["lr_sensitivity_high"] - g["lr_sensitivity"]).fillna(0).clip(lower=0)]
        ax.errorbar(g["d_model"], g["lr_sensitivity"], yerr=yerr, marker="o", ms=4, capsize=3, color=f"C{i % 10}",
                    label=label)
    ax.set_xscale("log", base=2)
    widths = sorted(table["d_model"].dropna().unique())
    ax.set_xticks(widths, [fmt_param(w) for w in widths])  # the widths themselves, not 2^k
    ax.xaxis.set_minor_formatter(pyplot().NullFormatter())
    ax.set_xlabel("width (d_model)")
    ax.set_ylabel("LR sensitivity")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    ax.set_title("LR sensitivity against width (Wortsman et al. 2023, Fig. 1): 95 % t-interval over seeds", fontsize=9)
    save_figure(fig, path, keyed.drop(columns="_line").rename(columns=display_name))


def _plot_signals(signals: pd.DataFrame, lines: list[str], path: Path) -> None:
    """Two rows of panels (attention logit, log Z), one panel per variant, one curve per width."""
    plt = pyplot()
    keyed = signals.assign(_line=[_line_label(tuple(r[k] for k in lines), lines) for r in signals.to_dict("records")])
    variants = list(dict.fromkeys(keyed["_line"]))
    fig, axes = plt.subplots(2, len(variants), figsize=(4.2 * len(variants), 7), squeeze=False)
    for j, line in enumerate(variants):
        sub = keyed[keyed["_line"] == line]
        for row, (y, label, log_y) in enumerate((("attn_logit_max", "largest attention logit", True),
                                                  ("log_z", "output log Z", False))):
            ax = axes[row, j]
            for i, (width, g) in enumerate(sub.groupby("d_model", sort=True)):
                g = g.sort_values("lr")
                yerr = [(g[y] - g[f"{y}_low"]).fillna(0).clip(lower=0), (g[f"{y}_high"] - g[y]).fillna(0).clip(lower=0)]
                ax.errorbar(g["lr"], g[y], yerr=yerr, marker="o", ms=4, capsize=3, color=f"C{i % 10}",
                            label=f"width {fmt_param(width)}")
                div = g[g["n_diverged"] > 0]
                ax.plot(div["lr"], div[y], ls="none", marker="x", color="red", ms=9, mew=2)
            ax.set_xscale("log")
            if log_y:
                ax.set_yscale("log")
            ax.set_xlabel("learning rate")
            ax.set_ylabel(label)
            ax.set_title(line, fontsize=9)
            ax.grid(alpha=0.3, which="both")
            ax.legend(fontsize=7)
    fig.suptitle("Wortsman et al.'s instability signals at the last logged step against lr: mean over seeds, "
                 "95 % t-interval (red x: some seed diverged; its values are from before)", fontsize=9)
    save_figure(fig, path, keyed.drop(columns="_line").rename(columns=display_name))


register_section("width", order=60, applies=lambda f: not f.searched and transfer.is_grid(f.runs, f.keys, "d_model"),
                 write=lambda f, out_dir, echo: width_section(f.runs, f.keys, out_dir, echo),
                 files=tuple(WIDTH_FILES), left_out=grid_left_out("d_model", "lr transfer across width"))
