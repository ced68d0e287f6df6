"""The report's figures, each a PNG with the data it draws in a .csv beside it: validation
curves, the final-loss grid, per-layer profiles, a value against a swept key, the boundary
searches; `draw_figures` makes the standard ones."""

from __future__ import annotations

import io
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from ...runs.reading import Run
from ...runs.schema import TRAIN_LOSS, VAL_LOSS, Status, layer_index, layer_tag_pattern
from ...train.layer_signals import LAYER_SIGNALS, signals
from .. import study
from ..boundary import at_search_budget
from .tables import display_name, ended_as, fmt_param, is_missing, sets_the_unit, sort_key


def pyplot():
    import matplotlib  # why here: the Agg backend is chosen before pyplot loads (no display needed)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_png(fig, path: Path) -> None:
    """The PNG alone. A figure laid out by its own engine (the per-layer ones, `fixed_figure`) is
    saved at its size and dpi, whatever it holds, in PALETTE_COLOURS colours; any other is fitted
    by tight_layout and saved whole, its bounding box grown to hold what sticks out (a long
    legend, a wide tick label)."""
    if fig.get_layout_engine() is not None:
        from PIL import Image  # matplotlib's own dependency

        drawn = io.BytesIO()
        fig.savefig(drawn, format="png", dpi=fig.dpi)
        drawn.seek(0)
        with Image.open(drawn) as image:
            image.convert("RGB").quantize(PALETTE_COLOURS, method=Image.Quantize.FASTOCTREE,
                                          dither=Image.Dither.NONE).save(path, format="PNG", optimize=True)
    else:
        with warnings.catch_warnings():  # a figure tight_layout cannot fit (a long legend) is saved whole below
            warnings.filterwarnings("ignore", message="Tight layout not applied")
            fig.tight_layout()
        fig.savefig(path, dpi=100, bbox_inches="tight")
    pyplot().close(fig)


def save_figure(fig, path: Path, data) -> None:
    """The PNG (save_png), and beside it (same stem, .csv) the data it draws: a list of dicts or a DataFrame."""
    save_png(fig, path)
    (data if isinstance(data, pd.DataFrame) else pd.DataFrame(data)).to_csv(path.with_suffix(".csv"), index=False)


# A fixed-size figure is stored with a palette of this many colours: its hundreds of thin,
# antialiased, half-transparent lines blend into ~60,000 colours that PNG compresses poorly (a
# 64-block sweep's figure near 500 KB); 256 chosen by octree look the same at a third the bytes.
PALETTE_COLOURS = 256
# A per-layer figure has one size, whatever the sweep (a 64-block stack, 200 runs): PROFILE_SIZE
# inches at PROFILE_DPI, 1100 × 520 pixels. Before, its legends grew it to 15,000 pixels and 9 MB.
PROFILE_SIZE = (11.0, 5.2)
PROFILE_DPI = 100
# A panel of more lines than CROWDED draws them thin and coloured by placement (or the first varied
# key), with one legend entry a colour, not one a line: no legend can name 70 lines legibly.
CROWDED = 12


def fixed_figure(ncols: int):
    """A figure of PROFILE_SIZE at PROFILE_DPI with `ncols` panels side by side, laid out by the
    constrained engine (which makes room for legends below the panels inside that size)."""
    fig = pyplot().figure(figsize=PROFILE_SIZE, dpi=PROFILE_DPI, layout="constrained")
    return fig, fig.subplots(1, ncols, squeeze=False)[0]


def key_colours(values: list) -> dict:
    """A colour for each value of a colouring key, in order: matplotlib's ten, or past ten a
    colour map's evenly spaced ones (no two values share a colour)."""
    if len(values) <= 10:
        return {v: f"C{i}" for i, v in enumerate(values)}
    cmap = pyplot().get_cmap("viridis")
    return {v: cmap(i / (len(values) - 1)) for i, v in enumerate(values)}


def colour_legend(ax, counts: dict, colours: dict, name: str, below: bool = True, extra: list = ()) -> None:
    """A crowded panel's legend: one entry a colour (`name`=value, how many lines), then `extra`
    handles (a baseline); below the panel (legend_below) or inside it where it fits best."""
    from matplotlib.lines import Line2D

    shown = [v for v in colours if v in counts]  # in the colours' order
    handles = [Line2D([], [], color=colours[v], lw=2, label=f"{name}={fmt_param(v)} ({counts[v]} lines)" if name
                      else f"{counts[v]} lines") for v in shown]
    title = f"{sum(counts.values())} lines, too many to name: coloured by {name}" if name else None
    if below:
        legend_below(ax, [*handles, *extra], title=title)
    else:
        ax.legend(handles=[*handles, *extra], fontsize=7, title=title, title_fontsize=7, loc="best")


def _label(r: Run, keys: list[str]) -> str:
    return ", ".join(f"{display_name(k)}={fmt_param(r.config.get(k))}" for k in keys) or f"run #{r.index}"


def _curve_points(members: list[Run], tag: str = VAL_LOSS) -> list[tuple[int, float, float, float, int]]:
    """(step, mean, low, high, n) of `tag` (val/loss) over a cell's seeds; after a run diverged it
    counts as its initial loss ℓ₀ (as in the loss statistics), never dropped."""
    curves = [(dict(r.scalars.get(tag, [])), r) for r in members]
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


def _drawn_unfinished(r: Run) -> bool:
    """A run whose curve is drawn while none of its cell's has finished: not malformed, and not a
    finished run whose summary the statistics refuse (study.untrusted_reason)."""
    return r.status != Status.MALFORMED and study.untrusted_reason(r) is None


def _outcome_note(members: list[Run]) -> str:
    """" (stuck)" for one run, " (n=3: 2 learned, 1 diverged)" for several: what each came to, in
    runs.csv's outcome words (a run not finished: its status)."""
    st = [ended_as(r) for r in members]
    if len(st) == 1:
        return f" ({st[0]})"
    return f" (n={len(st)}: " + ", ".join(f"{st.count(k)} {k}" for k in dict.fromkeys(st)) + ")"


# markers of the lines of one panel, each hollow and a size smaller than the one before, over
# lines each thinner than the one before: curves that coincide (two runs that stalled on the same
# plateau) stay visible, nested, instead of the last one drawn hiding the others
MARKERS = "osD^v<>p"


def line_style(i: int) -> dict:
    """The matplotlib keywords of a panel's i-th line (see MARKERS)."""
    return {"marker": MARKERS[i % len(MARKERS)], "ms": max(3.0, 8.0 - 1.2 * (i % 5)), "mfc": "none",
            "lw": max(0.8, 2.6 - 0.45 * (i % 5))}


def plot_val_curves(runs: list[Run], keys: list[str], path: Path, tag: str = VAL_LOSS,
                    what: str = "validation loss") -> str | None:
    """`tag` (validation loss; train/loss for the training loss) against step: one panel per
    value of the first varied key where two or more vary (else one panel), one line per cell
    (runs that differ only in seed) labelled by the other varied keys and how its runs ended:
    the mean over seeds with its 95 % t-interval shaded: the cell's replicates (study.screen)
    once one has finished, every run (dashed) before. Each line its marker (line_style), so
    coinciding curves stay visible; a panel of more than CROWDED lines draws them thin, coloured
    by placement (or the first other key), one legend entry a colour (curve_figure). The drawn
    data go to the .csv beside the PNG. Returns a note if there is nothing to draw."""
    with_val = [r for r in runs if r.scalars.get(tag)]
    if not with_val:
        return f"no run has logged {tag} yet: the {what} figure is skipped"
    panel_key, line_keys = (keys[0], keys[1:]) if len(keys) > 1 else (None, keys)
    panels = sorted({r.config.get(panel_key) for r in with_val}, key=sort_key) if panel_key else [None]
    groups = sorted(study.cells(with_val, keys).items(), key=lambda kv: [sort_key(v) for v in kv[0]])
    # once a run of a cell has finished, its curve averages the replicates the statistics use
    # (before any has, the runs still going; a run whose summary is not trusted, study.untrusted_reason,
    # or malformed, never: its numbers are left out of every statistic, its curve too)
    groups = [(cell, ms) for cell, members in groups
              if (ms := study.screen(members).kept or [r for r in members if _drawn_unfinished(r)])]
    labels = list(dict.fromkeys(_label(ms[0], line_keys) for _, ms in groups))
    colors = {lab: f"C{i % 10}" for i, lab in enumerate(labels)}
    shade_key = "placement.name" if "placement.name" in line_keys else (line_keys[0] if line_keys else None)
    lines, data = [], []
    for cell, members in groups:
        points = _curve_points(members, tag)
        if not points:
            continue
        steps, means, lows, highs, _ = map(list, zip(*points))
        lab = _label(members[0], line_keys)
        crosses = []
        for r in members:
            finite = [(st, v) for st, v in r.scalars.get(tag, []) if math.isfinite(v)]
            if r.status == Status.DIVERGED and finite:  # the cross sits at the divergence step
                at = r.summary.get("diverged_at_step")
                crosses.append((at if at is not None else finite[-1][0], finite[-1][1]))
        lines.append({"panel": panels.index(cell[0]) if panel_key else 0, "label": lab + _outcome_note(members),
                      "colour": colors[lab], "shade": fmt_param(members[0].config.get(shade_key)) if shade_key else "",
                      "steps": steps, "means": means, "lows": lows, "highs": highs,
                      "dashed": any(r.unfinished for r in members), "crosses": crosses})
        data += [{**dict(zip(map(display_name, keys), cell)), "step": p[0], "mean": p[1], "low": p[2], "high": p[3],
                  "n": p[4]} for p in points]
    baselines = [baseline_values([r for cell, ms in groups if not panel_key or cell[0] == value for r in ms])
                 for value in panels]
    titles = [f"{display_name(panel_key)}={fmt_param(value)}" if panel_key else what for value in panels]
    fig = curve_figure(lines, titles, baselines, what, max((p["n"] for p in data), default=0),
                       display_name(shade_key) if shade_key else "")
    save_figure(fig, path, data)
    return None


CURVE_KEYS = "(red x: diverged; dashed: still running; grey dashed: unigram baseline)"


def curve_figure(lines: list[dict], titles: list[str], baselines: list[list[float]], what: str, most_seeds: int,
                 shade_name: str, key_line: str = CURVE_KEYS):
    """The loss-curve figure: a panel per title (up to four a row), in each its `lines` (dicts:
    panel index, label, colour, shade = the value that colours it where crowded, steps, means,
    lows, highs, dashed, crosses = [(step, loss)] of diverged runs) and its unigram baselines.
    Up to CROWDED lines a panel: each its marker and width (line_style), its interval shaded, a
    legend entry a line. More: thin lines, coloured by `shade_name`, a legend entry a colour,
    no shading (the intervals are in the .csv). Returns the figure."""
    plt = pyplot()
    cols = min(len(titles), 4)
    rows = math.ceil(len(titles) / cols)
    width = 4.2 * cols if cols > 1 else 6.4  # one panel holds every line: room for them
    fig, axes = plt.subplots(rows, cols, figsize=(width, 3.4 * rows + 0.4), squeeze=False, sharey=True)
    shades = key_colours(list(dict.fromkeys(ln["shade"] for ln in lines)))  # one colour a value in every panel
    for k, (ax, title) in enumerate(zip(axes.flat, titles)):
        mine = [ln for ln in lines if ln["panel"] == k]
        crowded = len(mine) > CROWDED
        for i, ln in enumerate(mine):
            ls = "--" if ln["dashed"] else "-"
            if crowded:
                ax.plot(ln["steps"], ln["means"], color=shades[ln["shade"]], ls=ls, lw=0.7, alpha=0.6)
            else:
                ax.plot(ln["steps"], ln["means"], color=ln["colour"], ls=ls, **line_style(i), label=ln["label"])
                ax.fill_between(ln["steps"], ln["lows"], ln["highs"], color=ln["colour"], alpha=0.2)
            for x, y in ln["crosses"]:
                ax.plot(x, y, marker="x", color="red", ms=6 if crowded else 9, mew=1.5 if crowded else 2)
        _baseline_lines(ax, baselines[k])
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if crowded:
            counts = {}
            for ln in mine:
                counts[ln["shade"]] = counts.get(ln["shade"], 0) + 1
            colour_legend(ax, counts, shades, shade_name, below=False,
                          extra=ax.get_legend_handles_labels()[0])  # the baselines: the thin lines have no label
        else:
            ax.legend(fontsize=7, loc="best")
    for ax in axes[:, 0]:
        ax.set_ylabel(what)
    for ax in list(axes.flat)[len(titles):]:
        ax.axis("off")
    title = curve_title(most_seeds)
    if most_seeds >= 2 and any(sum(ln["panel"] == k for ln in lines) > CROWDED for k in range(len(titles))):
        title += f" where a panel has at most {CROWDED} lines"
    fig.suptitle(f"{what[0].upper() + what[1:]}: {title}\n{key_line}", fontsize=10)
    return fig


CURVE_COLUMNS = ("step", "mean", "low", "high", "n")


def draw_curve_table(table: pd.DataFrame, what: str):
    """The loss-curve figure redrawn from the data plot_val_curves wrote beside it (its
    val_loss.csv or train_loss.csv, read back): the same panels, lines, intervals and crowding
    rule (curve_figure). That file keeps each line's mean and interval, not how its runs ended,
    where one diverged nor the unigram baseline: the figure says so. Returns the figure."""
    keys = [c for c in table.columns if c not in CURVE_COLUMNS]
    panel_key, line_keys = (keys[0], keys[1:]) if len(keys) > 1 else (None, keys)
    shade_key = "placement" if "placement" in line_keys else (line_keys[0] if line_keys else None)
    printed = lambda v: fmt_param(_plain(v))  # noqa: E731
    panels = list(dict.fromkeys(printed(v) for v in table[panel_key])) if panel_key else [None]
    cells = table.groupby(keys, sort=False, dropna=False) if keys else [((), table)]
    labels, lines = {}, []
    for cell, rows in cells:
        values = dict(zip(keys, cell if isinstance(cell, tuple) else (cell,)))
        lab = ", ".join(f"{k}={printed(values[k])}" for k in line_keys) or "mean"
        colour = labels.setdefault(lab, f"C{len(labels) % 10}")
        rows = rows.sort_values("step")
        lines.append({"panel": panels.index(printed(values[panel_key])) if panel_key else 0,
                      "label": f"{lab} (n={int(rows['n'].max())})", "colour": colour,
                      "shade": printed(values[shade_key]) if shade_key else "", "steps": list(rows["step"]),
                      "means": list(rows["mean"]), "lows": list(rows["low"]), "highs": list(rows["high"]),
                      "dashed": False, "crosses": []})
    titles = [f"{panel_key}={value}" if panel_key else what for value in panels]
    return curve_figure(lines, titles, [[] for _ in panels], what, int(table["n"].max()) if len(table) else 0,
                        shade_key or "", "(redrawn from its .csv, which keeps each line's mean and interval: "
                        "not how its runs ended, where one diverged, nor the unigram baseline)")


def curve_title(most_seeds: int) -> str:
    """What a loss curve is: the interval named only where some line has one (n >= 2 seeds)."""
    return "mean over seeds, 95 % t-interval shaded" if most_seeds >= 2 else "one seed per line (n = 1), no interval"


def baseline_values(runs: list[Run]) -> list[float]:
    """The distinct unigram baselines (summary.json's baseline_loss, to 4 decimals) of `runs`:
    runs whose unit differs are never pooled, so neither is it."""
    return sorted({round(b, 4) for r in runs if isinstance(b := r.summary.get("baseline_loss"), (int, float))
                   and math.isfinite(b)})


def _baseline_lines(ax, values: list[float]) -> None:
    """The unigram baselines of a panel (baseline_values of its runs): dashed and labelled, one
    line per distinct value."""
    for b in values:
        ax.axhline(b, ls="--", color="0.3", lw=1, label=f"unigram baseline {b:.3f}", zorder=1)


def _cell_text(members: list[Run]) -> tuple[float, str]:
    """Mean final val loss over the cell's seeds (a diverged run as its initial loss) with its
    95 % t-interval, n, and the runs that did not learn."""
    c = study.cell_stats(members)
    kept = study.screen(members).kept  # the runs the numbers are from
    text = [] if not math.isfinite(c["mean"]) else [f"{c['mean']:.3f}"]
    if text and math.isfinite(c["low"]):
        text[0] += f" ±{(c['high'] - c['low']) / 2:.3f}"
    if text and c["n"] > 1:
        text.append(f"n={c['n']}")
    notes = [f"div@{r.summary.get('diverged_at_step')}" if c["n"] == 1 else f"{c['n_diverged']} div"
             for r in kept if r.status == Status.DIVERGED][:1]
    notes += [f"{c['n_stalled']} stalled"] * bool(c["n_stalled"]) + ["failed"] * bool(c["n_failed"])
    notes += [f"{c['n_left_out']} left out"] * bool(c["n_left_out"])
    return c["mean"], "\n".join(text + notes)


def plot_final_grid(runs: list[Run], keys: list[str], path: Path) -> tuple[str | None, str | None]:
    """A heatmap of final validation loss over the first two varied keys (a bar chart with
    one varied key): each cell the mean over its runs (seeds, and any further varied keys),
    a diverged run counted as its initial loss, ± the half-width of the 95 % t-interval (two
    seeds or more), n, and how many diverged, stalled or failed; the drawn numbers go to
    final_val_loss.csv. A further key that sets the loss's unit (tables.sets_the_unit) is never
    pooled: it splits the rows. Returns (kind, note): kind is "heatmap" or "bar chart", or None
    with a note when skipped."""
    if not keys:
        return None, "no hyperparameter varies across the runs: the final-loss grid is skipped"
    plt = pyplot()
    row_key, col_key = keys[0], (keys[1] if len(keys) > 1 else None)
    apart = [k for k in keys[2:] if sets_the_unit(k)]  # rows split by them, never pooled
    row_keys = [row_key, *apart]
    row_of = lambda r: tuple(r.config.get(k) for k in row_keys)  # noqa: E731
    row_vals = sorted({row_of(r) for r in runs}, key=lambda t: [sort_key(v) for v in t])
    col_vals = sorted({r.config.get(col_key) for r in runs}, key=sort_key) if col_key else [None]
    grid = np.full((len(row_vals), len(col_vals)), np.nan)
    texts = [["" for _ in col_vals] for _ in row_vals]
    for i, rv in enumerate(row_vals):
        for j, cv in enumerate(col_vals):
            members = [r for r in runs if row_of(r) == rv and (col_key is None or r.config.get(col_key) == cv)]
            if members:
                grid[i, j], texts[i][j] = _cell_text(members)
    row_label = lambda rv: ", ".join([fmt_param(rv[0]), *(f"{display_name(k)}={fmt_param(v)}"  # noqa: E731
                                                          for k, v in zip(apart, rv[1:]))])
    others = [display_name(k) for k in keys[2:] if k not in apart]
    subtitle = f"\n(pooled over {', '.join(others)} and seeds)" if others else ""
    table = study.cell_table(runs, [k for k in (row_key, col_key, *apart) if k], sort_key)
    # the interval is named only where some cell has one (two seeds or more)
    what = ("mean ± 95 % t-interval" if np.isfinite(table["low"].astype(float)).any()
            else "one seed each, no interval")
    if col_key is None:
        fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(row_vals) + 2), 3.6))
        heights = np.nan_to_num(grid[:, 0], nan=0.0)
        bars = ax.bar(range(len(row_vals)), heights, color="C0")
        for b, v, t in zip(bars, grid[:, 0], [t[0] for t in texts]):
            if not math.isfinite(v):
                b.set_hatch("//")
            ax.annotate(t or "no value", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=8)
        top = np.nanmax(grid[:, 0]) if np.isfinite(grid[:, 0]).any() else 1.0
        ax.set_ylim(0, 1.3 * top)  # headroom: the labels above the tallest bar stay clear of the title
        _baseline_lines(ax, baseline_values(runs))
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7, loc="lower right")
        ax.set_xticks(range(len(row_vals)), [row_label(v) for v in row_vals])
        ax.set_xlabel(display_name(row_key))
        ax.set_ylabel("final validation loss")
        ax.set_title(f"Final validation loss, {what} (hatched: failed)" + subtitle, fontsize=10)
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
        ax.set_yticks(range(len(row_vals)), [row_label(v) for v in row_vals])
        ax.set_xlabel(display_name(col_key))
        ax.set_ylabel(display_name(row_key))
        half = " half-width over seeds" if "±" in what else ""
        ax.set_title(f"Final val loss: {what}{half}\n(diverged = initial loss; red frame: some diverged/failed)"
                     + subtitle, fontsize=10)
        kind = "heatmap"
    save_figure(fig, path, table.rename(columns=display_name))
    return kind, None


def layer_profile(r: Run, family: str) -> dict[int, list[float]]:
    """{step: [value of layer_00, layer_01, ...]} for the steps where every layer is logged."""
    tags = sorted((t for t in r.scalars if re.fullmatch(layer_tag_pattern(family), t)), key=layer_index)
    if not tags:
        return {}
    per_tag = [dict(r.scalars[t]) for t in tags]
    steps = set(per_tag[0]).intersection(*per_tag[1:])
    return {s: [d[s] for d in per_tag] for s in sorted(steps)}


# the unit of a per-layer family's value, for its axis label (the others are ratios or plain numbers)
UNITS = {"attn_entropy": "nats", "attn_logit_max": "|q·k|/√d_head"}
LINESTYLES = ["-", "--", ":", "-."]
LOG_SPAN = 100.0  # a value axis is logarithmic only where the drawn values span more than two decades


def profile_axis(ax, values: list[float], family: str) -> None:
    """The value axis of a per-layer panel: linear unless the positive values span more than
    LOG_SPAN (a log axis over a narrow range shows two ticks, and a linear one reads directly),
    at least five ticks, and the family's unit in the label."""
    from matplotlib.ticker import LogLocator, MaxNLocator

    finite = [v for v in values if math.isfinite(v)]
    if finite and min(finite) > 0 and max(finite) / min(finite) > LOG_SPAN:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, numticks=12))
    else:
        ax.yaxis.set_major_locator(MaxNLocator(nbins=6, min_n_ticks=5))
    unit = UNITS.get(family)
    ax.set_ylabel(f"{family} ({unit})" if unit else family)


# how far below a fixed-size panel its legend starts: clear of the tick labels and the axis label
LEGEND_DROP_INCHES = 0.42


def legend_below(ax, handles=None, title: str | None = None) -> None:
    """The legend under the panel, outside the axes: it never covers a line. A figure saved whole
    (save_png) grows to hold it; in a fixed-size one (fixed_figure) it hangs LEGEND_DROP_INCHES
    under the panel, and the layout engine shrinks the panel to make room. Two columns where
    more than four entries are short enough to sit side by side."""
    from matplotlib.transforms import ScaledTranslation

    labels = [h.get_label() for h in handles] if handles is not None else ax.get_legend_handles_labels()[1]
    if handles is None:
        handles = ax.get_legend_handles_labels()[0]
    if not handles:
        return
    fixed = ax.figure.get_layout_engine() is not None
    wide = max(map(len, labels)) > (48 if fixed else 1_000)
    where = dict(bbox_to_anchor=(0.5, 0.0), bbox_transform=ax.transAxes + ScaledTranslation(
        0, -LEGEND_DROP_INCHES, ax.figure.dpi_scale_trans)) if fixed else dict(bbox_to_anchor=(0.5, -0.24))
    ax.legend(handles=handles, labels=labels, fontsize=6.5 if fixed else 7, loc="upper center",
              ncol=2 if len(labels) > 4 and not wide else 1, frameon=False, title=title,
              title_fontsize=6.5 if fixed else 7, **where)


def _profile_line(ax, i: int, v: np.ndarray, **kw) -> None:
    """The i-th line of a profile panel: its own dash pattern and hollow marker of its own size,
    so profiles that coincide (Post-LN's and DeepNorm's activation std at step 0) stay visible;
    a marker on at most ~16 blocks of a deep stack."""
    style = {**line_style(i), "ls": LINESTYLES[i % len(LINESTYLES)], "markevery": max(1, len(v) // 16)}
    ax.plot(np.arange(len(v)), np.where(np.isfinite(v), v, np.nan), **{**style, **kw})


def _same_profile_groups(profiles: list[tuple[np.ndarray, object]]) -> list[tuple[np.ndarray, list]]:
    """[(profile, [member, ...])]: members whose profiles are identical (at step 0: same init and
    batch; warmup and lr act only after it) share one, in the order first seen."""
    groups: list[tuple[np.ndarray, list]] = []
    for v, member in profiles:
        for g in groups:
            if g[0].shape == v.shape and np.allclose(g[0], v, rtol=1e-6, atol=0, equal_nan=True):
                g[1].append(member)
                break
        else:
            groups.append((v, [member]))
    return groups


# the columns of a per-layer figure's data that are not a varied key (_profile_rows)
PROFILE_COLUMNS = ("run", "path", "seed", "step", "layer", "value")


def plot_layer_profiles(runs: list[Run], keys: list[str], family: str, path: Path) -> str | None:
    """`family`/layer_XX against layer index at step 0 and at each run's last logged step, drawn
    by draw_layer_table from the rows the .csv beside it keeps (_profile_rows), each run's last
    step labelled with what it came to (ended_as). Returns a note if no run logged the family."""
    profiles = {r.index: layer_profile(r, family) for r in runs}
    drawn = [r for r in runs if profiles[r.index]]
    if not drawn:
        return f"no run has logged {family}/layer_XX yet: the {family} figure is skipped"
    rows = pd.DataFrame(_profile_rows(drawn, profiles, keys))
    fig = draw_layer_table(rows, family, {r.rel: ended_as(r) for r in drawn})
    save_figure(fig, path, rows)
    return None


def draw_layer_table(table: pd.DataFrame, family: str, ended: dict | None = None):
    """The per-layer figure of `family` from its data (a `<family>_layers.csv` as the report
    writes it, or read back from a committed one, gzip'd or not): two panels, step 0 and each
    run's last step, against layer index; a fixed size (PROFILE_SIZE at PROFILE_DPI) whatever the
    sweep. `ended`: {run path: what it came to}, named after each last-step label where given.

    Up to CROWDED lines a panel: each line its own dash pattern and marker, coloured by
    placement (by run where placement does not vary), one legend entry a line, the seed in the
    label where seeds vary; at step 0 runs whose values are identical share one line. More lines
    than that: thin lines coloured by placement (or the first varied key), one legend entry a
    colour. Legends sit below the panels; the axis is linear unless it spans > 2 decades.
    Returns the figure, for save_png or save_figure."""
    keys = [c for c in table.columns if c not in PROFILE_COLUMNS]
    seeds_vary = "seed" in table.columns and table["seed"].nunique(dropna=False) > 1
    label_keys = keys + ["seed"] * seeds_vary
    runs = []  # (run, path, {key: value}, {step: values by layer}), in the table's order
    for (run, rel), rows in table.groupby(["run", "path"], sort=False):
        settings = {k: _plain(rows[k].iloc[0]) for k in label_keys}
        steps = {int(st): g.sort_values("layer")["value"].to_numpy(dtype=float) for st, g in rows.groupby("step")}
        runs.append((run, rel, settings, steps))
    step0 = _same_profile_groups([(steps[0], (run, settings)) for run, _, settings, steps in runs if 0 in steps])
    crowded = max(len(step0), len(runs)) > CROWDED
    colour_key = "placement" if "placement" in keys else (keys[0] if crowded and keys else None)
    if colour_key:  # by the value as printed: a NaN (a key some runs lack) is one value, "-"
        firsts = {fmt_param(s[colour_key]): s[colour_key] for *_, s, _ in reversed(runs)}
        colours = key_colours(sorted(firsts, key=lambda text: sort_key(firsts[text])))
        colour_of = lambda run, settings: colours[fmt_param(settings[colour_key])]  # noqa: E731
    else:  # one colour a run (few lines), or one for all of them
        colours = {run: f"C{i % 10}" if not crowded else "C0" for i, (run, *_) in enumerate(runs)}
        colour_of = lambda run, settings: colours[run]  # noqa: E731
    label = lambda run, settings, names: (", ".join(f"{k}={fmt_param(settings[k])}" for k in names)  # noqa: E731
                                          or f"run #{run}")

    panels = [[], []]  # (values, label, colour, colour-key value as printed) a line
    shade = lambda settings: fmt_param(settings[colour_key]) if colour_key else None  # noqa: E731
    for v, members in step0:
        common = [k for k in label_keys if len({repr(settings[k]) for _, settings in members}) == 1]
        run, settings = members[0]
        text = label(run, settings, common) + (f" ({len(members)} runs)" if len(members) > 1 else "")
        panels[0].append((v, text, colour_of(run, settings), shade(settings)))
    for run, rel, settings, steps in runs:
        last = max(steps)
        outcome = f" ({ended[rel]})" if ended and rel in ended else ""
        panels[1].append((steps[last], label(run, settings, label_keys) + f" @{last}{outcome}",
                          colour_of(run, settings), shade(settings)))

    fig, axes = fixed_figure(2)
    for ax, lines, title in zip(axes, panels, ("step 0 (initialisation, first batch)", "last logged step of each run")):
        if len(lines) > CROWDED:
            for v, _, colour, _ in lines:
                ax.plot(np.arange(len(v)), np.where(np.isfinite(v), v, np.nan), color=colour, lw=0.6, alpha=0.55)
            counts = {}
            for *_, value in lines:
                counts[value] = counts.get(value, 0) + 1
            colour_legend(ax, counts, colours if colour_key else {None: "C0"}, colour_key or "")
        else:
            for i, (v, text, colour, _) in enumerate(lines):
                _profile_line(ax, i, v, color=colour, label=text)
            legend_below(ax)
        ax.set_title(title, fontsize=10)
        profile_axis(ax, [x for v, *_ in lines for x in v], family)
        ax.set_xlabel("layer index")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3, which="both")
    unit = UNITS.get(family)
    fig.suptitle(f"{family}/layer_XX: {LAYER_SIGNALS[family].about}" + (f", in {unit}" if unit == "nats" else ""),
                 fontsize=10)
    return fig


def _plain(value):
    """A table cell as the Python value a config holds (numpy's int64 sorts and prints as an int)."""
    return value.item() if isinstance(value, np.generic) else value


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


SWEEP_TITLE = ("Final validation loss vs {x}: {interval}\n(diverged = initial loss; "
               "red x: some diverged, grey square: some stalled; dashed: unigram baseline)")


def interval_words(table) -> str:
    """"mean over seeds, 95 % t-interval" where some cell of `table` has one (n >= 2), else says there is none."""
    return ("mean over seeds, 95 % t-interval" if np.isfinite(table["low"].astype(float)).any()
            else "one seed per point (n = 1), no interval")


def same_value(column, value):
    """column == value, where a missing value matches the missing ones (NaN != NaN)."""
    return column.isna() if is_missing(value) else column == value


def plot_sweep(runs: list[Run], keys: list[str], x_key: str, path: Path, cell_table=study.cell_table,
               ylabel: str = "final validation loss", title: str = SWEEP_TITLE, log_y: bool = False) -> None:
    """A per-cell value against `x_key` (lr: log axis; layers: log axis too), one panel per
    value of the first other varied key, one line per value of the remaining keys: mean over
    seeds with 95 % t-interval error bars; red x: a cell with diverged runs, grey square: with
    stalled runs; dashed: the unigram baseline. By default the final validation loss
    (diverged = initial loss); `cell_table` gives another value (study.model_update_table).
    The cells drawn go to the .csv beside the PNG."""
    plt = pyplot()
    others = [k for k in keys if k != x_key]
    panel_key, line_keys = (others[0], others[1:]) if others else (None, [])
    table = cell_table(runs, [*others, x_key], sort_key)
    panels = list(dict.fromkeys(table[panel_key])) if panel_key else [None]
    cols = min(len(panels), 4)
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False, sharey=True)
    for ax, value in zip(axes.flat, panels):
        sub = table if panel_key is None else table[same_value(table[panel_key], value)]
        # dropna=False: a key only some settings have (depth_mup's placement.exponent beside
        # placements without one) is empty for the others, and their lines must still be drawn
        lines = sub.groupby(line_keys, sort=False, dropna=False) if line_keys else [((), sub)]
        for i, (line, cell) in enumerate(lines):
            line = line if isinstance(line, tuple) else (line,)
            label = ", ".join(f"{display_name(k)}={fmt_param(v)}" for k, v in zip(line_keys, line)
                              if not is_missing(v)) or "mean"
            yerr = [(cell["mean"] - cell["low"]).fillna(0), (cell["high"] - cell["mean"]).fillna(0)]
            ax.errorbar(cell[x_key], cell["mean"], yerr=yerr, marker="o", ms=4, capsize=3, color=f"C{i % 10}",
                        label=f"{label} (n={int(cell['n'].max())})")
            div, stall = cell[cell["n_diverged"] > 0], cell[cell["n_stalled"] > 0]
            ax.plot(div[x_key], div["mean"], ls="none", marker="x", color="red", ms=9, mew=2)
            ax.plot(stall[x_key], stall["mean"], ls="none", marker="s", mfc="none", mec="0.4", ms=10)
        baseline = sub["baseline_loss"].mean()
        if math.isfinite(baseline):
            ax.axhline(baseline, ls="--", color="0.3", lw=1, label=f"unigram baseline {baseline:.3f}")
        if np.isfinite(sub["mean"].astype(float)).any():
            ax.set_xscale("log")
            if log_y:
                ax.set_yscale("log")
        else:  # a log axis with no point on it cannot be laid out (every run diverged before a finite loss)
            ax.text(0.5, 0.5, "no finite value to draw", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(f"{display_name(panel_key)}={fmt_param(value)}" if panel_key else "", fontsize=10)
        ax.set_xlabel("learning rate" if x_key == "lr" else display_name(x_key))
        ax.grid(alpha=0.3, which="both")
        legend_below(ax)  # outside the axes: it never covers a point or the y label
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(title.format(x=display_name(x_key), interval=interval_words(table)), fontsize=9)
    save_figure(fig, path, table.rename(columns=display_name))


def draw_figures(runs: list[Run], keys: list[str], out_dir: Path) -> tuple[list, list[str]]:
    """The standard figures (each with its .csv): [(title, file name)] and notes on skipped ones."""
    figures, notes = [], []
    for tag, what, name in ((VAL_LOSS, "validation loss", "val_loss.png"), (TRAIN_LOSS, "train loss", "train_loss.png")):
        note = plot_val_curves(runs, keys, out_dir / name, tag, what)
        if note:
            notes.append(note)
        else:
            figures.append((what[0].upper() + what[1:], name))
    kind, note = plot_final_grid(runs, keys, out_dir / "final_val_loss.png")
    if note:
        notes.append(note)
    else:
        figures.append((f"Final validation loss ({kind})", "final_val_loss.png"))
    for family in (s.tag for s in signals(per_head=False) if s.in_report):
        note = plot_layer_profiles(runs, keys, family, out_dir / f"{family}_layers.png")
        if note:
            notes.append(note)
        else:
            figures.append((f"Per-layer {family} at step 0 and at the end", f"{family}_layers.png"))
    return figures, notes


def plot_boundary_search(table, points, key: str, setting_cols: list[str], label, path: Path) -> None:
    """The boundary searches, one row per setting (`table`: boundary.csv's rows; `points`:
    boundary_points.csv's): every probed value as a green dot (every seed learned), a red x (some
    seed collapsed or diverged) or a blue triangle (some never learned, none unstable), the
    bracket shaded between last stable and first unstable; the points go to the .csv beside it."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(table) + 1.4))
    points = at_search_budget(points)  # the budget check's reruns are the table's, not the search's
    for y, row in enumerate(table.to_dict("records")):
        mine = points
        for c in setting_cols:
            mine = mine[mine[c].astype(str) == str(row[c])]
        at = mine.groupby(key)["learned"].apply(lambda v: bool((v == "yes").all()))
        slow = (mine.groupby(key)["outcome"].apply(lambda v: not v.isin(["collapsed", "diverged"]).any())
                if "outcome" in mine.columns else at & False)  # no seed unstable: too slow, not unstable
        stable = [x for x, ok in at.items() if ok]  # not at.sum(): '' for a setting not probed yet
        ax.plot(stable, [y] * len(stable), "o", color="tab:green", ms=5)
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
    save_figure(fig, path, points)
