"""`normexp report PATH`: compare the runs under a folder — a table, runs.csv, report.md, figures.

Everything is read back through the run-folder contract (see runfolder.py); nothing is
re-computed by training:

    summary.json            status and final numbers (written at start and at the end)
    .hydra/config.yaml      the hyperparameters; the ones that differ between runs are
    .hydra/overrides.yaml   the "varied keys", ordered as the user typed them in the sweep
    events.out.tfevents.*   val/loss curves and the per-layer instruments

A run still going has "running" in summary.json and no final numbers yet (a run that says
"running" but whose process is gone from this host is shown as "killed"): its values come
from its event file, as far as TensorBoard has flushed it (every 30 s). A run that failed
before training has summary.json but no events; it is listed with its error.
"""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

from ..config.compose import config_groups
from ..runs.schema import (CSV_FIELDS, EXECUTION_SETTINGS, LAYER_FAMILIES, TABLE_FIELDS, VAL_LOSS, Status, layer_index,
                           layer_tag_pattern)
from . import study
from ..runs.reading import Run, flatten, load_config, load_overrides, load_scalars, process_alive, read_runs  # noqa: F401
from ..config.keys import override_key
# Tie-break order for varied keys the overrides do not mention (e.g. set by an experiment file).
PRIORITY = ("placement.name", "norm.name", "layers", "warmup", "lr", "d_model", "schedule.name", "seed")


class ReportError(Exception):
    """A user-facing problem; str(e) is one line naming the problem and the fix."""


load_runs = read_runs  # the one reader of run folders (normexp.runs.reading)


# ------------------------------------------------------------------- varied keys

def display_name(key: str) -> str:
    """placement.name -> placement (a config group is named by its option)."""
    group, _, rest = key.partition(".")
    return group if group in config_groups() and rest == "name" else key


def _override_key(override: str) -> str:
    key = override_key(override)
    return f"{key}.name" if key in config_groups() else key


def varied_keys(runs: list[Run]) -> list[str]:
    """Config keys whose values differ between runs, most important first: in the order the
    sweep's overrides name them, then by PRIORITY. A group's sub-keys (norm.eps, ...) are
    left out when the group's name explains them, and seed never counts: runs that differ
    only in seed are replicates of one setting (study.REPLICATE_KEYS)."""
    missing = object()
    keys = sorted({k for r in runs for k in r.config} - set(EXECUTION_SETTINGS) - set(study.REPLICATE_KEYS))
    values = {k: [r.config.get(k, missing) for r in runs] for k in keys}
    varied = [k for k in keys if len({repr(v) for v in values[k]}) > 1]
    # a key some runs lack and the others share one value of is a newer config's default
    # (runs from before the key existed), not a hyperparameter the sweep varies
    varied = [k for k in varied if len({repr(v) for v in values[k] if v is not missing}) > 1]

    def explained_by_group(k: str) -> bool:
        name_key = k.split(".", 1)[0] + ".name"
        if name_key == k or name_key not in varied:
            return False
        seen = {}
        for n, v in zip(values[name_key], values[k]):
            if seen.setdefault(repr(n), repr(v)) != repr(v):
                return False
        return True

    varied = [k for k in varied if not explained_by_group(k)]
    position = {}
    for r in runs:
        for i, o in enumerate(r.overrides):
            position.setdefault(_override_key(o), i)

    def rank(k: str):
        if k in position:
            return (0, position[k], k)
        return (1, PRIORITY.index(k) if k in PRIORITY else len(PRIORITY), k)

    return sorted(varied, key=rank)


def sort_key(value):
    """Numbers before strings, numbers by value: 0 < 5 < 50, not '0' < '50' < '5'."""
    if isinstance(value, bool) or value is None:
        return (2, str(value))
    if isinstance(value, (int, float)):
        return (0, float(value))
    return (1, str(value))


# ---------------------------------------------------------------------- the table

def fmt(value, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3g}" if 0 < abs(value) < 0.01 else f"{value:.{digits}f}"  # lr=3e-4 stays 0.0003
    return str(value)


def fmt_param(value) -> str:
    """A hyperparameter value as the user would type it: 0.01, 3e-05, 200."""
    if value is None:
        return "-"
    return f"{value:g}" if isinstance(value, float) else str(value)


def fmt_rate(value) -> str:
    """Throughput as a whole number with thousands separators."""
    return "-" if value is None else f"{value:,.0f}"


def table_rows(runs: list[Run], keys: list[str], left_out: dict | None = None) -> tuple[list[str], list[list[str]]]:
    """One row per run; the last column says whether it is in the statistics (`left_out`:
    {run index: short reason}, from `left_out_of_statistics`)."""
    head = ["#", *map(display_name, keys), *TABLE_FIELDS.values(), "in stats"]
    rows = []
    for r in runs:
        m = {**r.metrics(), "status": r.status}  # the status as the report sees it ("killed")
        shown = (m["status"] if f == "status" else fmt_rate(m.get(f)) if f == "tokens_per_second" else fmt(m.get(f))
                 for f in TABLE_FIELDS)
        why = (left_out or {}).get(r.index)
        rows.append([str(r.index), *(fmt_param(r.config.get(k)) for k in keys), *shown,
                     "yes" if why is None else f"no: {why}"])
    return head, rows


def left_out_of_statistics(runs: list[Run], keys: list[str]) -> list[tuple[Run, str, str]]:
    """(run, short reason, why) of every run the settings' statistics leave out (study.screen),
    in run order."""
    out = [item for members in study.cells(runs, keys).values() for item in study.screen(members).left_out]
    return sorted(out, key=lambda item: item[0].index)


def screening_notes(left_out: list[tuple[Run, str, str]]) -> list[str]:
    """The rule, and a line per run left out of the statistics."""
    if not left_out:
        return []
    notes = [f"{len(left_out)} run{'s' * (len(left_out) != 1)} left out of the loss statistics (means, intervals, "
             "LR sensitivity): only finished runs (completed, stalled, diverged) are replicates, one per seed, and of "
             "several finished runs of one setting and seed the newest is kept; max stable lr and critical depth "
             "use the same replicates, where a run that diverged without an initial loss still counts as not learned"]
    notes += [f"run #{r.index} left out: {why} ({r.rel})" for r, _, why in left_out]
    return notes


def text_table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    numeric = [all(_is_number(r[i]) for r in rows) for i in range(len(head))]
    line = lambda cells: "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(cells, widths, numeric))  # noqa: E731
    return "\n".join([line(head), "  ".join("-" * w for w in widths), *map(line, rows)])


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    esc = lambda c: c.replace("|", "\\|")  # noqa: E731
    return "\n".join(["| " + " | ".join(map(esc, head)) + " |", "|" + "---|" * len(head),
                      *("| " + " | ".join(map(esc, r)) + " |" for r in rows)])


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
        return True
    except ValueError:
        return text == "-"


def write_csv(path: Path, runs: list[Run], keys: list[str], left_out: dict) -> None:
    """runs.csv: one row per run; `left_out` {run index: why it is not in the statistics}."""
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "path", *map(display_name, keys), *CSV_FIELDS, "left_out"])
        for r in runs:
            m = {**r.metrics(), "status": r.status}  # the status as the report sees it ("killed")
            w.writerow([r.index, r.rel, *(r.config.get(k) for k in keys),
                        *("" if m.get(c) is None else m.get(c) for c in CSV_FIELDS), left_out.get(r.index, "")])


# ------------------------------------------------------------------------ figures

def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _label(r: Run, keys: list[str]) -> str:
    return ", ".join(f"{display_name(k)}={fmt_param(r.config.get(k))}" for k in keys) or f"run #{r.index}"


def _curve_points(members: list[Run]) -> list[tuple[int, float, float, float, int]]:
    """(step, mean, low, high, n) of val/loss over a cell's seeds; after a run diverged it
    counts as its initial loss ℓ₀ (as in the loss statistics), never dropped."""
    curves = [(dict(r.scalars.get(VAL_LOSS, [])), r) for r in members]
    steps = sorted({st for c, _ in curves for st in c})
    out = []
    for st in steps:
        values = []
        for c, r in curves:
            if st in c and math.isfinite(c[st]):
                values.append(c[st])
            elif r.status == Status.DIVERGED and (not c or st >= max(c)):  # at and after its divergence
                values.append(r.summary.get("initial_loss"))
        mean, low, high = study.t_interval(values)
        if math.isfinite(mean):
            out.append((st, mean, low, high, sum(v is not None for v in values)))
    return out


def _outcome_note(members: list[Run]) -> str:
    """" (n=3, 1 diverged, 2 stalled)": the cell's size and how many did not learn."""
    st = [r.status for r in members]
    parts = [f"n={len(members)}"] + [f"{st.count(k)} {k}" for k in (Status.DIVERGED, Status.STALLED, Status.FAILED, Status.RUNNING, Status.KILLED)
                                     if st.count(k)]
    return " (" + ", ".join(parts) + ")"


def plot_val_curves(runs: list[Run], keys: list[str], path: Path) -> str | None:
    """Validation loss against step: one panel per value of the first varied key, one line per
    cell (runs that differ only in seed) labelled by the other varied keys: the mean over
    seeds with its 95 % t-interval shaded: the cell's replicates (study.screen) once one has
    finished, every run (dashed) before. The drawn data go to the .csv beside the PNG.
    Returns a note if there is nothing to draw."""
    with_val = [r for r in runs if r.scalars.get(VAL_LOSS)]
    if not with_val:
        return "no run has logged val/loss yet: the validation-loss figure is skipped"
    plt = _pyplot()
    panel_key, line_keys = (keys[0], keys[1:]) if keys else (None, [])
    panels = sorted({r.config.get(panel_key) for r in with_val}, key=sort_key) if panel_key else [None]
    groups = sorted(study.cells(with_val, keys).items(), key=lambda kv: [sort_key(v) for v in kv[0]])
    # once a run of a cell has finished, its curve averages the replicates the statistics use
    groups = [(cell, study.screen(members).kept or members) for cell, members in groups]
    labels = list(dict.fromkeys(_label(ms[0], line_keys) for _, ms in groups))
    colors = {lab: f"C{i % 10}" for i, lab in enumerate(labels)}
    cols = min(len(panels), 4)
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False, sharey=True)
    data = []
    for ax, value in zip(axes.flat, panels):
        for cell, members in groups:
            if panel_key and cell[0] != value:
                continue
            points = _curve_points(members)
            steps, means, lows, highs, ns = map(list, zip(*points))
            lab = _label(members[0], line_keys)
            unfinished = any(r.unfinished for r in members)
            ax.plot(steps, means, color=colors[lab], ls="--" if unfinished else "-", marker=".",
                    label=lab + _outcome_note(members))
            ax.fill_between(steps, lows, highs, color=colors[lab], alpha=0.2)
            data += [{**dict(zip(map(display_name, keys), cell)), "step": p[0], "mean": p[1], "low": p[2], "high": p[3],
                      "n": p[4]} for p in points]
            for r in members:
                finite = [(st, v) for st, v in r.scalars[VAL_LOSS] if math.isfinite(v)]
                if r.status == Status.DIVERGED and finite:  # the cross sits at the divergence step
                    at = r.summary.get("diverged_at_step")
                    ax.plot(at if at is not None else finite[-1][0], finite[-1][1], marker="x", color="red", ms=9, mew=2)
        ax.set_title(f"{display_name(panel_key)}={fmt_param(value)}" if panel_key else "validation loss", fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel("validation loss")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle("Validation loss: mean over seeds, 95 % t-interval shaded (red x: diverged; dashed: still running)",
                 fontsize=10)
    _save(fig, path, data)
    return None


def _save(fig, path: Path, data) -> None:
    """The PNG, and beside it (same stem, .csv) the data it draws: a list of dicts or a DataFrame."""
    import pandas as pd

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    _pyplot().close(fig)
    (data if isinstance(data, pd.DataFrame) else pd.DataFrame(data)).to_csv(path.with_suffix(".csv"), index=False)


def _cell_text(members: list[Run]) -> tuple[float, str]:
    """Mean final val loss over the cell's seeds (a diverged run as its initial loss) with its
    95 % t-interval, n, and the runs that did not learn."""
    c = study.cell_stats(members)
    text = [] if not math.isfinite(c["mean"]) else [f"{c['mean']:.3f}"]
    if text and math.isfinite(c["low"]):
        text[0] += f" ±{(c['high'] - c['low']) / 2:.3f}"
    if text and c["n"] > 1:
        text.append(f"n={c['n']}")
    notes = [f"div@{r.summary.get('diverged_at_step')}" if c["n"] == 1 else f"{c['n_diverged']} div"
             for r in members if r.status == Status.DIVERGED][:1]
    notes += [f"{c['n_stalled']} stalled"] * bool(c["n_stalled"]) + ["failed"] * bool(c["n_failed"])
    notes += [f"{c['n_left_out']} left out"] * bool(c["n_left_out"])
    return c["mean"], "\n".join(text + notes)


def plot_final_grid(runs: list[Run], keys: list[str], path: Path) -> tuple[str | None, str | None]:
    """A heatmap of final validation loss over the first two varied keys (a bar chart with
    one varied key): each cell the mean over its runs (seeds, and any further varied keys),
    a diverged run counted as its initial loss, ± the half-width of the 95 % t-interval, n,
    and how many diverged, stalled or failed; the drawn numbers go to final_val_loss.csv. Returns
    (kind, note): kind is "heatmap" or "bar chart", or None with a note when skipped."""
    if not keys:
        return None, "no hyperparameter varies across the runs: the final-loss grid is skipped"
    plt = _pyplot()
    import numpy as np

    row_key, col_key = keys[0], (keys[1] if len(keys) > 1 else None)
    row_vals = sorted({r.config.get(row_key) for r in runs}, key=sort_key)
    col_vals = sorted({r.config.get(col_key) for r in runs}, key=sort_key) if col_key else [None]
    grid = np.full((len(row_vals), len(col_vals)), np.nan)
    texts = [["" for _ in col_vals] for _ in row_vals]
    for i, rv in enumerate(row_vals):
        for j, cv in enumerate(col_vals):
            members = [r for r in runs if r.config.get(row_key) == rv and (col_key is None or r.config.get(col_key) == cv)]
            if members:
                grid[i, j], texts[i][j] = _cell_text(members)
    others = [display_name(k) for k in keys[2:]]
    subtitle = f"\n(pooled over {', '.join(others)} and seeds)" if others else ""
    if col_key is None:
        fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(row_vals) + 2), 3.6))
        heights = np.nan_to_num(grid[:, 0], nan=0.0)
        bars = ax.bar(range(len(row_vals)), heights, color="C0")
        for b, v, t in zip(bars, grid[:, 0], [t[0] for t in texts]):
            if not math.isfinite(v):
                b.set_hatch("//")
            ax.annotate(t or "no value", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(row_vals)), [fmt_param(v) for v in row_vals])
        ax.set_xlabel(display_name(row_key))
        ax.set_ylabel("final validation loss")
        ax.set_title("Final validation loss, mean ± 95 % t-interval (hatched: failed)" + subtitle, fontsize=10)
        kind = "bar chart"
    else:
        fig, ax = plt.subplots(figsize=(1.5 * len(col_vals) + 3, 0.9 * len(row_vals) + 2.2))
        masked = np.ma.masked_invalid(grid)
        im = ax.imshow(masked, cmap="viridis_r", aspect="auto")
        fig.colorbar(im, ax=ax, label="final validation loss")
        for i in range(len(row_vals)):
            for j in range(len(col_vals)):
                bad = not math.isfinite(grid[i, j])
                if bad and texts[i][j]:  # only diverged / failed runs: hatched grey cell
                    ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="0.85", edgecolor="red", hatch="xx", lw=1.5))
                elif "div" in texts[i][j] or "failed" in texts[i][j]:  # some runs of the cell: red frame
                    ax.add_patch(plt.Rectangle((j - 0.48, i - 0.48), 0.96, 0.96, fill=False, edgecolor="red", lw=2.5))
                # viridis_r: low loss is light yellow (black text), high loss dark (white text)
                light = not bad and (grid[i, j] - np.nanmin(grid)) <= 0.5 * (np.nanmax(grid) - np.nanmin(grid))
                ax.text(j, i, texts[i][j] or "–", ha="center", va="center", fontsize=8,
                        color="red" if bad else ("black" if light else "white"),
                        bbox=dict(facecolor="white", edgecolor="none", pad=1.5) if bad and texts[i][j] else None)
        ax.set_xticks(range(len(col_vals)), [fmt_param(v) for v in col_vals])
        ax.set_yticks(range(len(row_vals)), [fmt_param(v) for v in row_vals])
        ax.set_xlabel(display_name(col_key))
        ax.set_ylabel(display_name(row_key))
        ax.set_title("Final val loss: mean ± 95 % t-interval half-width over seeds\n(diverged = initial loss; red frame: some diverged/failed)" + subtitle, fontsize=10)
        kind = "heatmap"
    table = study.cell_table(runs, [k for k in (row_key, col_key) if k], sort_key)
    _save(fig, path, table.rename(columns=display_name))
    return kind, None


def layer_profile(r: Run, family: str) -> dict[int, list[float]]:
    """{step: [value of layer_00, layer_01, ...]} for the steps where every layer is logged."""
    tags = sorted((t for t in r.scalars if re.fullmatch(layer_tag_pattern(family), t)), key=layer_index)
    if not tags:
        return {}
    per_tag = [dict(r.scalars[t]) for t in tags]
    steps = set(per_tag[0]).intersection(*per_tag[1:])
    return {s: [d[s] for d in per_tag] for s in sorted(steps)}


def plot_layer_profiles(runs: list[Run], keys: list[str], family: str, path: Path) -> str | None:
    """`family`/layer_XX against layer index at step 0 and at each run's last logged step.
    Colour = placement (or run, if placement does not vary). At step 0 runs whose values are
    identical (same init and batch; warmup and lr act only after it) share one line."""
    import numpy as np

    profiles = {r.index: layer_profile(r, family) for r in runs}
    drawn = [r for r in runs if profiles[r.index]]
    if not drawn:
        return f"no run has logged {family}/layer_XX yet: the {family} figure is skipped"
    plt = _pyplot()
    color_key = "placement.name" if "placement.name" in keys else None
    color_vals = sorted({r.config.get(color_key) for r in drawn}, key=sort_key) if color_key else [r.index for r in drawn]
    color = {v: f"C{i % 10}" for i, v in enumerate(color_vals)}
    colour_of = lambda r: color[r.config.get(color_key) if color_key else r.index]  # noqa: E731
    styles = ["-", "--", ":", "-."]
    rest = [k for k in keys if k != color_key]
    combos = list(dict.fromkeys(tuple(repr(r.config.get(k)) for k in rest) for r in drawn))
    style_of = lambda r: styles[combos.index(tuple(repr(r.config.get(k)) for k in rest)) % len(styles)]  # noqa: E731

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=False)
    clean = lambda v: np.where(np.isfinite(v), v, np.nan)  # noqa: E731
    dots = lambda v: "o" if len(v) <= 64 else None  # noqa: E731 - a dot per block while they can be told apart
    # step 0: group identical profiles
    groups: list[tuple[np.ndarray, list[Run]]] = []
    for r in drawn:
        if 0 not in profiles[r.index]:
            continue
        v = np.array(profiles[r.index][0], dtype=float)
        for g in groups:
            if g[0].shape == v.shape and np.allclose(g[0], v, rtol=1e-6, atol=0, equal_nan=True):
                g[1].append(r)
                break
        else:
            groups.append((v, [r]))
    for v, members in groups:
        common = [k for k in keys if len({repr(m.config.get(k)) for m in members}) == 1]
        label = _label(members[0], common) + (f" ({len(members)} runs)" if len(members) > 1 else "")
        axes[0].plot(np.arange(len(v)), clean(v), marker=dots(v), ms=3, color=colour_of(members[0]),
                     ls="-" if len(members) > 1 else style_of(members[0]), label=label)
    axes[0].set_title("step 0 (initialisation, first batch)", fontsize=10)
    for r in drawn:
        last = max(profiles[r.index])
        v = np.array(profiles[r.index][last], dtype=float)
        tail = f" @{last}" + (f" {r.status}" if r.unfinished or r.status == Status.DIVERGED else "")
        axes[1].plot(np.arange(len(v)), clean(v), marker=dots(v), ms=3, color=colour_of(r), ls=style_of(r),
                     label=_label(r, keys) + tail)
    axes[1].set_title("last logged step of each run", fontsize=10)
    for ax in axes:
        ax.set_yscale("log")
        ax.set_xlabel("layer index")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    axes[0].set_ylabel(family)
    fig.suptitle(f"{family}/layer_XX: {LAYER_FAMILIES[family].about}", fontsize=10)
    _save(fig, path, _profile_rows(drawn, profiles, keys))
    return None


def _profile_rows(drawn: list[Run], profiles: dict, keys: list[str]) -> list[dict]:
    """The per-layer values the layer-profile figure draws: step 0 and each run's last step."""
    rows = []
    for r in drawn:
        steps = sorted({s for s in (0, max(profiles[r.index])) if s in profiles[r.index]})
        for st in steps:
            rows += [{"run": r.index, "path": r.rel, **{display_name(k): r.config.get(k) for k in keys},
                      "seed": r.config.get("seed"), "step": st, "layer": i, "value": v}
                     for i, v in enumerate(profiles[r.index][st])]
    return rows


# ------------------------------------------------------------- lr and depth sweeps

MIN_SWEEP_POINTS = 3  # an lr (or depth) curve needs at least this many swept values


def swept(runs: list[Run], keys: list[str], key: str) -> bool:
    return key in keys and len({r.config.get(key) for r in runs if r.config.get(key) is not None}) >= MIN_SWEEP_POINTS


SWEEP_TITLE = ("Final validation loss vs {x}: mean over seeds, 95 % t-interval\n(diverged = initial loss; "
               "red x: some diverged, grey square: some stalled; dashed: unigram baseline)")


def plot_sweep(runs: list[Run], keys: list[str], x_key: str, path: Path, cell_table=study.cell_table,
               ylabel: str = "final validation loss", title: str = SWEEP_TITLE, log_y: bool = False) -> None:
    """A per-cell value against `x_key` (lr: log axis; layers: log axis too), one panel per
    value of the first other varied key, one line per value of the remaining keys: mean over
    seeds with 95 % t-interval error bars; red x: a cell with diverged runs, grey square: with
    stalled runs; dashed: the unigram baseline. By default the final validation loss
    (diverged = initial loss); `cell_table` gives another value (study.model_update_table).
    The cells drawn go to the .csv beside the PNG."""
    plt = _pyplot()
    others = [k for k in keys if k != x_key]
    panel_key, line_keys = (others[0], others[1:]) if others else (None, [])
    table = cell_table(runs, [*others, x_key], sort_key)
    panels = list(dict.fromkeys(table[panel_key])) if panel_key else [None]
    cols = min(len(panels), 4)
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False, sharey=True)
    for ax, value in zip(axes.flat, panels):
        sub = table if panel_key is None else table[table[panel_key] == value]
        lines = sub.groupby(line_keys, sort=False) if line_keys else [((), sub)]
        for i, (line, cell) in enumerate(lines):
            line = line if isinstance(line, tuple) else (line,)
            label = ", ".join(f"{display_name(k)}={fmt_param(v)}" for k, v in zip(line_keys, line)) or "mean"
            yerr = [(cell["mean"] - cell["low"]).fillna(0), (cell["high"] - cell["mean"]).fillna(0)]
            ax.errorbar(cell[x_key], cell["mean"], yerr=yerr, marker="o", ms=4, capsize=3, color=f"C{i % 10}",
                        label=f"{label} (n={int(cell['n'].max())})")
            div, stall = cell[cell["n_diverged"] > 0], cell[cell["n_stalled"] > 0]
            ax.plot(div[x_key], div["mean"], ls="none", marker="x", color="red", ms=9, mew=2)
            ax.plot(stall[x_key], stall["mean"], ls="none", marker="s", mfc="none", mec="0.4", ms=10)
        baseline = sub["baseline_loss"].mean()
        if math.isfinite(baseline):
            ax.axhline(baseline, ls="--", color="0.3", lw=1, label=f"unigram baseline {baseline:.3f}")
        ax.set_xscale("log")
        if log_y:
            ax.set_yscale("log")
        ax.set_title(f"{display_name(panel_key)}={fmt_param(value)}" if panel_key else "", fontsize=10)
        ax.set_xlabel("learning rate" if x_key == "lr" else display_name(x_key))
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(title.format(x=display_name(x_key)), fontsize=9)
    _save(fig, path, table.rename(columns=display_name))


def sensitivity_section(runs: list[Run], keys: list[str], out_dir: Path) -> list[str]:
    """sensitivity.csv, lr_sensitivity.png and the report.md lines about them."""
    table = study.sensitivity_table(runs, keys, sort_key)
    table.rename(columns=display_name).to_csv(out_dir / "sensitivity.csv", index=False)
    plot_sweep(runs, keys, "lr", out_dir / "lr_sensitivity.png")
    setting = [k for k in keys if k != "lr"]
    head = [*map(display_name, setting), "LR sensitivity", "95 % bootstrap interval", "max stable lr", "seeds", "lrs",
            "left out"]
    rows = [[*(fmt_param(r[k]) for k in setting), fmt(r["lr_sensitivity"]),
             "-" if not math.isfinite(r["lr_sensitivity_low"]) else f"{r['lr_sensitivity_low']:.4f} … {r['lr_sensitivity_high']:.4f}",
             "none" if r["max_stable_lr"] is None or r["max_stable_lr"] != r["max_stable_lr"] else fmt_param(r["max_stable_lr"]),
             str(r["n_seeds"]), str(r["n_lrs"]), left_out_cell(r)] for r in table.to_dict("records")]
    return ["## Learning-rate sensitivity", "",
            "LR sensitivity = mean over the swept lr grid of min(ℓ(η), ℓ₀) − ℓ* (Wortsman et al. 2023 §3): ℓ(η) the "
            "mean final validation loss over seeds at η (a diverged run counts as its initial loss ℓ₀), ℓ* the best "
            "of these over the grid; lower is more robust. Interval: percentile bootstrap over seeds (seeds resampled "
            f"within each lr cell, {study.BOOTSTRAP_SAMPLES} resamples, fixed RNG seed). max stable lr: the largest lr "
            "at which every seed learned (completed at least stall_margin below the unigram baseline). "
            "Data: `sensitivity.csv`, `lr_sensitivity.csv`.", "",
            markdown_table(head, rows), "", "![final validation loss vs lr](lr_sensitivity.png)", ""]


def depth_section(runs: list[Run], keys: list[str], out_dir: Path) -> list[str]:
    """depth.csv, depth.png and the report.md lines about them: the deepest stack that learns."""
    table = study.depth_table(runs, keys, sort_key)
    table.rename(columns=display_name).to_csv(out_dir / "depth.csv", index=False)
    plot_sweep(runs, keys, "layers", out_dir / "depth_sweep.png")
    setting = [k for k in keys if k != "layers"]
    head = [*map(display_name, setting), "deepest stack that learns", "depths tried", "seeds", "left out"]
    rows = [[*(fmt_param(r[k]) for k in setting),
             "none" if r["deepest_learning_layers"] is None or str(r["deepest_learning_layers"]) in ("<NA>", "nan")
             else str(int(r["deepest_learning_layers"])), r["depths"], str(r["n_seeds"]), left_out_cell(r)]
            for r in table.to_dict("records")]
    lines = ["## Critical depth", "", "The deepest stack at which every seed learned (completed at least stall_margin "
             "below the unigram baseline). Data: `depth.csv`; the figure's cells: `depth_sweep.csv`.", "",
             markdown_table(head, rows), "", "![final validation loss vs depth](depth_sweep.png)", ""]
    if any(study.early_model_update(r) for r in runs):
        plot_sweep(runs, keys, "layers", out_dir / "depth_model_update.png", cell_table=study.model_update_table,
                   ylabel="early model update", log_y=True,
                   title="DeepNet's model update ‖f(x;θ_t) − f(x;θ_0)‖ / ‖f(x;θ_0)‖ at the first step it was measured "
                         "after 0, vs {x}\n(mean over seeds, 95 % t-interval; red x: some diverged, grey square: some "
                         "stalled; the step: depth_model_update.csv)")
        lines += ["How far the first updates move the model's output (Wang et al. 2022, Fig. 3): "
                  "‖f(x;θ_t) − f(x;θ_0)‖/‖f(x;θ_0)‖ on the fixed reference batch at the first step after 0 where it was "
                  "measured. Data: `depth_model_update.csv`.", "",
                  "![early model update vs depth](depth_model_update.png)", ""]
    return lines


def boundary_section(tables: list[Path], out_dir: Path, echo) -> list[str]:
    """The boundary sweeper's results (boundary.csv and boundary_points.csv of each search under
    the folder): a table, and boundary.png, one row per setting: every probed value as a green
    dot (every seed learned) or a red x (some seed did not), the bracket shaded between them."""
    import pandas as pd

    table = pd.concat([pd.read_csv(t) for t in tables], ignore_index=True)
    points = pd.concat([pd.read_csv(t.with_name("boundary_points.csv")) for t in tables], ignore_index=True)
    key = str(table["key"].iloc[0])
    setting_cols = [c for c in table.columns if c not in boundary_columns()]
    label = lambda row: ", ".join(f"{c}={fmt_param(row[c])}" for c in setting_cols) or "all runs"  # noqa: E731
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(table) + 1.4))
    for y, row in enumerate(table.to_dict("records")):
        mine = points
        for c in setting_cols:
            mine = mine[mine[c].astype(str) == str(row[c])]
        at = mine.groupby(key)["learned"].apply(lambda v: bool((v == "yes").all()))
        slow = (mine.groupby(key)["outcome"].apply(lambda v: not v.isin(["collapsed", "diverged"]).any())
                if "outcome" in mine.columns else at & False)  # no seed unstable: too slow, not unstable
        ax.plot([x for x, ok in at.items() if ok], [y] * int(at.sum()), "o", color="tab:green", ms=5)
        bad = [x for x, ok in at.items() if not ok and not slow[x]]
        ax.plot(bad, [y] * len(bad), "x", color="tab:red", ms=7, mew=2)
        too_slow = [x for x, ok in at.items() if not ok and slow[x]]
        ax.plot(too_slow, [y] * len(too_slow), "v", color="tab:blue", ms=6)
        if pd.notna(row["last_stable"]) and pd.notna(row["first_unstable"]):
            ax.fill_betweenx([y - 0.3, y + 0.3], row["last_stable"], row["first_unstable"], color="0.6", alpha=0.5)
    ax.set_yticks(range(len(table)), [label(r) for r in table.to_dict("records")], fontsize=7)
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_xlabel("learning rate" if key == "lr" else key)
    ax.grid(alpha=0.3, which="both", axis="x")
    ax.set_title(f"Boundary search over {key}: green dot = every seed learned, red x = some seed collapsed or "
                 "diverged,\nblue triangle = some seed never learned, none unstable; grey = the bracket", fontsize=8)
    _save(fig, out_dir / "boundary_search.png", points)
    head = [*setting_cols, "last stable", "first unstable", "ratio", "points", "runs", "monotone", "seeds"]
    two_edges = "upper_edge" in table.columns  # boundary.csv from before the outcome classes has one edge
    if two_edges:
        head += ["upper edge (why)", "lower edge: too slow .. learns"]
    rows = [[*(fmt_param(r[c]) for c in setting_cols), _or_word(r["last_stable"], "none"),
             _or_word(r["first_unstable"], "none (upper bound held)"), _or_word(r["ratio"], "-", "{:.2f}"),
             str(r["points_probed"]), str(r["runs_used"]), str(r["monotone"]), str(r["seeds"]),
             *([_edge_cell(r["upper_edge"], r["upper_why"]),
                _lower_cell(r["highest_too_slow"], r["lowest_learning"], r["lower_why"])] if two_edges else [])]
            for r in table.to_dict("records")]
    echo(f"\nboundary of {key} (last stable .. first unstable, every seed learned below):\n" + text_table(head, rows))
    return [f"## Boundary of {key}", "", f"The largest {key} at which every seed learned (last stable) and the "
            "smallest above it at which some seed did not (first unstable), found by the boundary sweeper's bisection; "
            "monotone = no stable point lies above the first unstable one. Upper edge: what bounded the search from "
            "above (unstable: some seed collapsed or diverged there; stalled: its seeds never learned at a higher "
            "value than one that learned; upper bound: it learned up to the search's upper bound; nothing learned: nothing "
            "learned and nothing was unstable — no stability limit). Lower edge: the largest value below the window "
            "where runs were too slow, and the smallest that learned. Data: `boundary.csv`, "
            "`boundary_points.csv` (every probed point and seed).", "", markdown_table(head, rows), "",
            f"![boundary of {key}](boundary_search.png)", ""]


def depth_law_section(tables: list[Path], out_dir: Path, echo) -> list[str]:
    """With lr searched at several depths (`layers` a setting key): the depth law (normexp/
    depth_law.py), depth_law.png (its points: depth_law.csv) and depth_law_slopes.csv (the slope table); [] otherwise."""
    import pandas as pd

    from . import depth_law

    table = pd.concat([pd.read_csv(t) for t in tables], ignore_index=True)
    if str(table["key"].iloc[0]) != "lr" or "layers" not in table.columns or table["layers"].nunique() < 2:
        return []
    line_cols = [c for c in table.columns if c not in boundary_columns() and c != "layers"]
    results = depth_law.laws(table, line_cols)
    head, rows = depth_law.table_rows(results, line_cols)
    pd.DataFrame([dict(zip(head, r)) for r in rows]).to_csv(out_dir / "depth_law_slopes.csv", index=False)
    depth_law.draw(results, line_cols, out_dir / "depth_law.png", _save)
    echo("\ndepth law (max stable lr vs depth, log-log fit; 95 % bootstrap over the brackets and depths):\n"
         + text_table(head, rows))
    return ["## Depth law", "", "The largest stable lr at each depth (the bracket last stable .. first unstable, "
            "kept only where the search found an upper edge above the learning window: a seed collapsed or "
            "diverged, or never learned above an lr that learned) against depth, log-log; slope of the "
            "least-squares line through the brackets' geometric middles, its 95 % interval a percentile bootstrap "
            "over the brackets (each limit drawn log-uniformly inside its bracket) and the depths (resampled), 2,000 "
            "resamples; the limit at the shallowest depth and the line's value at 1,000 blocks. Depths without a "
            "limit (nothing learned; upper bound: learned up to the search's bound) are listed, never "
            "fitted. Data: `depth_law_slopes.csv` (this table), `depth_law.csv` (the figure's points).", "", markdown_table(head, rows), "",
            "![depth law](depth_law.png)", ""]


def boundary_columns() -> set[str]:
    """The columns of boundary.csv that are results, not the setting."""
    return {"key", "last_stable", "first_unstable", "ratio", "verdict", "points_probed", "runs_used", "monotone",
            "seeds", "upper_edge", "upper_why", "lowest_learning", "highest_too_slow", "lower_edge", "lower_why",
            "runs_skipped"}


def _edge_cell(edge, why) -> str:
    """"unstable (diverged 1)": what bounded the search from above and the seeds' outcomes there."""
    edge = "" if edge != edge or edge is None else str(edge)
    why = "" if why != why or why is None else str(why)
    return f"{edge} ({why})" if why else edge or "-"


def _lower_cell(slow, start, why) -> str:
    if start is None or start != start:
        return "-"
    if slow is None or slow != slow:
        return f"learns from the lower bound {start:g}"
    return f"{slow:g} .. {start:g}" + (f" ({why})" if why == why and why else "")


def _or_word(value, word: str, pattern: str = "{:g}") -> str:
    return word if value is None or value != value else pattern.format(value)


def cell_rows(runs: list[Run], keys: list[str]) -> tuple[list[str], list[list[str]]]:
    """The settings table: one row per cell (runs that differ only in seed)."""
    table = study.cell_table(runs, keys, sort_key)
    head = [*map(display_name, keys), "n", "mean final val", "95 % t-interval", "below baseline", "diverged", "stalled",
            "failed", "left out"]
    rows = [[*(fmt_param(r[k]) for k in keys), str(r["n"]), fmt(r["mean"]) if math.isfinite(r["mean"]) else "-",
             f"{r['low']:.4f} … {r['high']:.4f}" if math.isfinite(r["low"]) else "-",
             f"{100 * r['margin_below_baseline']:.1f} %" if math.isfinite(r["margin_below_baseline"]) else "-",
             str(r["n_diverged"]), str(r["n_stalled"]), str(r["n_failed"]), left_out_cell(r)]
            for r in table.to_dict("records")]
    return head, rows


def left_out_cell(row: dict) -> str:
    """"0", or "2: 1 killed, 1 duplicate seed"."""
    return str(row["n_left_out"]) + (f": {row['left_out']}" if row["n_left_out"] else "")


# ------------------------------------------------------------------------- report

def run_notes(runs: list[Run]) -> list[str]:
    """A line for each run that did not finish cleanly: failed, killed, still running."""
    notes = []
    for r in runs:
        if r.status == Status.FAILED:
            notes.append(f"run #{r.index} failed: {r.summary.get('error') or 'no error recorded'} ({r.rel})")
        elif r.status == Status.KILLED:
            # absolute: the hint is pasted from wherever the user is, not from the report's folder
            resume = (f"`normexp train ... resume=true hydra.run.dir={r.path.resolve()}` continues it from its last "
                      "checkpoint" if any(r.path.glob("checkpoints/step_*.pt")) else
                      "it saved no checkpoint, so it can only be run again from step 0")
            notes.append(f"run #{r.index} was killed (its process {r.summary.get('pid')} is gone) before it could "
                         f"write a final status: its values are read from its event file; {resume}")
        elif r.status == Status.REQUEUED:
            notes.append(f"run #{r.index} was stopped by SLURM (time limit or preemption) after a checkpoint at step "
                         f"{r.summary.get('steps_completed')} and requeued ({r.summary.get('requeues')} time(s)): it "
                         f"resumes from there when SLURM starts it again ({r.rel})")
        elif r.status in (Status.RUNNING, Status.UNKNOWN):
            what = "is still running" if r.status == Status.RUNNING else "has no summary.json yet"
            notes.append(f"run #{r.index} {what}: its values are read from its event file, "
                         f"as far as flushed ({r.rel})")
    return notes


def _check_paths(root: Path, out: Path | None) -> Path:
    """The output folder, after checking the input folder exists and the output is writable."""
    if not root.exists():
        raise ReportError(f"{root}: no such folder; give a sweep folder, e.g. runs/multirun/<date>/<time>")
    if not root.is_dir():
        raise ReportError(f"{root} is a file; give the folder that holds the run folders")
    out_dir = Path(out) if out is not None else root
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_check = out_dir / ".normexp-report-write-test"
        write_check.write_text("")
        write_check.unlink()
    except OSError as e:
        raise ReportError(f"cannot write to {out_dir} ({e.strerror}); choose another folder with --out") from None
    return out_dir


def draw_figures(runs: list[Run], keys: list[str], out_dir: Path) -> tuple[list, list[str]]:
    """The standard figures (each with its .csv): [(title, file name)] and notes on skipped ones."""
    figures, notes = [], []
    note = plot_val_curves(runs, keys, out_dir / "val_loss.png")
    if note:
        notes.append(note)
    else:
        figures.append(("Validation loss", "val_loss.png"))
    kind, note = plot_final_grid(runs, keys, out_dir / "final_val_loss.png")
    if note:
        notes.append(note)
    else:
        figures.append((f"Final validation loss ({kind})", "final_val_loss.png"))
    for family in (name for name, f in LAYER_FAMILIES.items() if f.in_report):
        note = plot_layer_profiles(runs, keys, family, out_dir / f"{family}_layers.png")
        if note:
            notes.append(note)
        else:
            figures.append((f"Per-layer {family} at step 0 and at the end", f"{family}_layers.png"))
    return figures, notes


def overview_line(runs: list[Run], keys: list[str], root: Path) -> str:
    counts = {}
    for r in runs:
        counts[r.status] = counts.get(r.status, 0) + 1
    seeds = sorted({r.config.get("seed") for r in runs}, key=sort_key)
    return (f"{len(runs)} run{'s' * (len(runs) != 1)} under {root}: "
            + ", ".join(f"{n} {s}" for s, n in counts.items())
            + (f"; varied: {', '.join(map(display_name, keys))}" if keys else "; no hyperparameter varies")
            + f"; seeds (replicates): {len(seeds)}")


def make_report(path: Path, out: Path | None = None, echo=print) -> dict:
    """Build the tables (one row per run; one per setting, seeds pooled), runs.csv,
    settings.csv, report.md and the figures, each figure with a .csv of the data it draws;
    with lr swept, sensitivity.csv and lr_sensitivity.png; with layers swept, depth.csv and
    depth_sweep.png. Returns what was written."""
    root = Path(path)
    out_dir = _check_paths(root, out)
    runs = read_runs(root)
    if not runs:
        raise ReportError(f"{root}: no run folders found (a run folder holds .hydra/config.yaml); "
                          "give a folder written by `normexp train`")
    keys = varied_keys(runs)
    run_keys = keys + [k for k in study.REPLICATE_KEYS if len({repr(r.config.get(k)) for r in runs}) > 1]
    runs.sort(key=lambda r: ([sort_key(r.config.get(k)) for k in run_keys], r.rel))
    for i, r in enumerate(runs, 1):
        r.index = i
    left_out = left_out_of_statistics(runs, keys)
    left_out_short = {r.index: short for r, short, _ in left_out}
    head, rows = table_rows(runs, run_keys, left_out_short)
    cell_head, cell_body = cell_rows(runs, keys)
    study.cell_table(runs, keys, sort_key).rename(columns=display_name).to_csv(out_dir / "settings.csv", index=False)
    overview = overview_line(runs, keys, root)
    figures, notes = draw_figures(runs, keys, out_dir)
    notes += screening_notes(left_out) + run_notes(runs)
    if len(keys) > 2:
        notes.append(f"the final-loss grid shows {display_name(keys[0])} × {display_name(keys[1])} and "
                     f"pools {', '.join(map(display_name, keys[2:]))}")
    sections, extra = [], []
    searched = sorted(root.rglob("boundary.csv"))
    if searched:  # a boundary search: its points are no grid, so no LR sensitivity or depth table
        sections += boundary_section(searched, out_dir, echo)
        extra += ["boundary_search.png"]
        law = depth_law_section(searched, out_dir, echo)
        if law:
            sections += law
            extra += ["depth_law_slopes.csv", "depth_law.png"]
    if swept(runs, keys, "lr") and not searched:
        sections += sensitivity_section(runs, keys, out_dir)
        extra += ["sensitivity.csv", "lr_sensitivity.png"]
    if swept(runs, keys, "layers") and not searched:
        sections += depth_section(runs, keys, out_dir)
        extra += ["depth.csv", "depth_sweep.png"]
    csv_path, md_path = out_dir / "runs.csv", out_dir / "report.md"
    write_csv(csv_path, runs, run_keys, left_out_short)
    md = [f"# normexp report: `{root}`", "", overview, "", "## Settings (seeds pooled)", "",
          "Mean final validation loss over seeds, a diverged run counted as its initial loss; 95 % t-interval "
          "over seeds (none for n = 1); below baseline: how far the mean sits below the unigram baseline. "
          "n: the runs in the mean, finished ones only and one per seed; left out: the others and why (Notes).", "",
          markdown_table(cell_head, cell_body), "", *sections, "## Runs", "", markdown_table(head, rows), ""]
    if notes:
        md += ["## Notes", "", *(f"- {n}" for n in notes), ""]
    md += ["## Figures", ""]
    for title, name in figures:
        md += [f"### {title}", "", f"![{title}]({name})", ""]
    md_path.write_text("\n".join(md))
    echo(overview)
    echo(text_table(head, rows))
    echo("\nper setting (seeds pooled):\n" + text_table(cell_head, cell_body))
    for n in notes:
        echo(f"note: {n}")
    written = [csv_path, md_path, *(out_dir / name for _, name in figures), *(out_dir / n for n in extra)]
    echo("wrote " + ", ".join(str(p) for p in written))
    return {"runs": runs, "keys": keys, "figures": [out_dir / n for _, n in figures], "notes": notes,
            "csv": csv_path, "markdown": md_path, "left_out": left_out}
