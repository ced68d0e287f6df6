"""The report's sections and notes: the overview line, notes on runs left out or unfinished,
and the sections a study adds (LR sensitivity, critical depth, boundary searches, depth law),
each its report.md lines, with its table and figure written beside."""

from __future__ import annotations

from collections.abc import Collection

import math
from pathlib import Path

import pandas as pd

from ...runs.reading import Run
from ...runs.safe_files import read_yaml
from ...runs.schema import Status
from .. import depth_law, study
from ..boundary import FAILURE_RULE, RESULT_COLUMNS, budget_check_rows, points_file, row_edge_class
from .figures import plot_boundary_search, plot_sweep, save_figure
from .registry import Folder, ReportError, register_section
from .tables import (display_name, ended_as, fmt, fmt_param, left_out_cell, markdown_table, same_columns, sort_key,
                     text_table)


def overview_line(runs: list[Run], keys: list[str], root: Path | str) -> str:
    """"N runs under ROOT: 4 completed (learned), 2 stalled (1 slow, 1 stuck), ...": each status
    with, where it says less, the outcomes it holds (runs.csv's two columns); ROOT as the caller
    names it (report.md: the folder's name only)."""
    by_status: dict[str, list[str]] = {}
    for r in runs:
        by_status.setdefault(str(r.status), []).append(ended_as(r))

    def part(status: str, words: list[str]) -> str:
        kinds = list(dict.fromkeys(words))
        if kinds == [status]:
            return f"{len(words)} {status}"
        inner = kinds[0] if len(kinds) == 1 else ", ".join(f"{words.count(k)} {k}" for k in kinds)
        return f"{len(words)} {status} ({inner})"

    seeds = sorted({r.config.get("seed") for r in runs}, key=sort_key)
    return (f"{len(runs)} run{'s' * (len(runs) != 1)} under {root}: "
            + ", ".join(part(s, words) for s, words in by_status.items())
            + (f"; varied: {', '.join(map(display_name, keys))}" if keys else "; no hyperparameter varies")
            + f"; seeds (replicates): {len(seeds)}")


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


def run_notes(runs: list[Run], folder: str | None = None) -> list[str]:
    """A line for each run that did not finish cleanly: failed, killed, still running.

    A killed run's resume hint names its folder absolute for the terminal (pasted from wherever
    the user is); with `folder` (the reported folder's name, for report.md, which is committed
    and shared) as `folder/<run>`, to run from the folder that holds it."""
    notes = []
    for r in runs:
        if r.status == Status.FAILED:
            notes.append(f"run #{r.index} failed: {r.summary.get('error') or 'no error recorded'} ({r.rel})")
        elif r.status == Status.KILLED:
            run_dir = (str(r.path.resolve()) if folder is None
                       else folder if r.rel == "." else f"{folder}/{r.rel}")
            where = "" if folder is None else f" (from the folder that holds {folder})"
            resume = (f"`normexp train ... resume=true hydra.run.dir={run_dir}`{where} continues it from its last "
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


MIN_SWEEP_POINTS = 3  # an lr (or depth) curve needs at least this many swept values


def _values(runs: list[Run], key: str) -> set:
    return {r.config.get(key) for r in runs if r.config.get(key) is not None}


def swept(runs: list[Run], keys: list[str], key: str) -> bool:
    """Some setting was tried at MIN_SWEEP_POINTS values of `key` or more (a curve to draw)."""
    return key in keys and bool(on_enough_points(runs, keys, key)[0])


def on_enough_points(runs: list[Run], keys: list[str], axis: str) -> tuple[list[Run], list[str]]:
    """(the runs of the settings tried at MIN_SWEEP_POINTS values of `axis` or more, a label for
    each other setting with its count): a setting tried at one lr has no lr sensitivity (it
    would read 0) and no max stable lr worth the name, so it is left out of the section, by name."""
    others = [k for k in keys if k != axis]
    settings: dict[tuple, list[Run]] = {}
    for r in runs:
        settings.setdefault(tuple(repr(r.config.get(k)) for k in others), []).append(r)
    kept, short = [], []
    for members in settings.values():
        n = len(_values(members, axis))
        if n >= MIN_SWEEP_POINTS:
            kept += members
        else:
            label = ", ".join(f"{display_name(k)}={fmt_param(members[0].config.get(k))}" for k in others) or "every run"
            short.append(f"{label} ({n} {display_name(axis)} value{'s' * (n != 1)})")
    return kept, short


def axis_left_out(title: str, axis: str):
    """A section's `left_out`: why `title` (over `axis`) is not drawn, for a folder that is no boundary search."""
    def why(f: Folder) -> str | None:
        if f.searched:
            return None
        n = len(_values(f.runs, axis))
        if n < MIN_SWEEP_POINTS:
            return f"{title} ({display_name(axis)} takes {n} value{'s' * (n != 1)}; it needs {MIN_SWEEP_POINTS} or more)"
        return (f"{title} (no setting was tried at {MIN_SWEEP_POINTS} {display_name(axis)} values or more; "
                f"{display_name(axis)} takes {n} across the runs)")
    return why


def short_settings_line(short: list[str], axis: str, what: str) -> list[str]:
    """The line under a section's table naming the settings left out of it (none: no line)."""
    if not short:
        return []
    return [f"Left out of this section ({what} needs {MIN_SWEEP_POINTS} {display_name(axis)} values or more "
            f"per setting): {'; '.join(short)}.", ""]


def sensitivity_section(runs: list[Run], keys: list[str], out_dir: Path) -> list[str]:
    """sensitivity.csv, lr_sensitivity.png and the report.md lines about them, over the settings
    tried at MIN_SWEEP_POINTS lrs or more (the others named below the table)."""
    runs, short = on_enough_points(runs, keys, "lr")
    table = study.sensitivity_table(runs, keys, sort_key)
    table.rename(columns=display_name).to_csv(out_dir / "sensitivity.csv", index=False)
    plot_sweep(runs, keys, "lr", out_dir / "lr_sensitivity.png")
    setting = [k for k in keys if k != "lr"]
    head = [*map(display_name, setting), "LR sensitivity", "95 % t-interval over seeds", "max stable lr", "seeds", "lrs",
            "left out"]
    rows = [[*(fmt_param(r[k]) for k in setting), fmt(r["lr_sensitivity"]),
             "-" if not math.isfinite(r["lr_sensitivity_low"]) else f"{r['lr_sensitivity_low']:.4f} … {r['lr_sensitivity_high']:.4f}",
             "none" if r["max_stable_lr"] is None or r["max_stable_lr"] != r["max_stable_lr"] else fmt_param(r["max_stable_lr"]),
             str(r["n_seeds"]), str(r["n_lrs"]), left_out_cell(r)] for r in table.to_dict("records")]
    return ["## Learning-rate sensitivity", "",
            "LR sensitivity = mean over the swept lr grid of min(ℓ(η), ℓ₀) − ℓ* (Wortsman et al. 2023 §3): ℓ(η) the "
            "mean final validation loss over seeds at η (a diverged run counts as its initial loss ℓ₀), ℓ* the best "
            "of these over the grid; lower is more robust. Interval: t-interval over seeds, seed k's share "
            "mean_η ℓ_k(η) − ℓ_k(η*) at the best mean's η* (a percentile bootstrap over seeds, "
            f"{study.BOOTSTRAP_SAMPLES} resamples, is in `sensitivity.csv` beside it: with 3 seeds it is too narrow, "
            "see docs/results/methods). max stable lr: the largest lr "
            "at which every seed learned (completed at least stall_margin below the unigram baseline). "
            "Data: `sensitivity.csv`, `lr_sensitivity.csv`.", "",
            markdown_table(head, rows), "", *short_settings_line(short, "lr", "an lr sensitivity"),
            "![final validation loss vs lr](lr_sensitivity.png)", ""]


register_section("sensitivity", order=30, applies=lambda f: not f.searched and swept(f.runs, f.keys, "lr"),
                 write=lambda f, out_dir, echo: sensitivity_section(f.runs, f.keys, out_dir),
                 files=("sensitivity.csv", "lr_sensitivity.png"),
                 left_out=axis_left_out("lr sensitivity and max stable lr", "lr"))


def depth_section(runs: list[Run], keys: list[str], out_dir: Path) -> list[str]:
    """depth.csv, depth.png and the report.md lines about them: the deepest stack that learns,
    for the settings tried at MIN_SWEEP_POINTS depths or more (the others named below the table)."""
    runs, short = on_enough_points(runs, keys, "layers")
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
             markdown_table(head, rows), "", *short_settings_line(short, "layers", "a critical depth"),
             "![final validation loss vs depth](depth_sweep.png)", ""]
    if any(study.early_model_update(r) for r in runs):
        plot_sweep(runs, keys, "layers", out_dir / "depth_model_update.png", cell_table=study.model_update_table,
                   ylabel="early model update", log_y=True,
                   title="DeepNet's model update ‖f(x;θ_t) − f(x;θ_0)‖ / ‖f(x;θ_0)‖ at the first step it was measured "
                         "after 0, vs {x}\n({interval}; red x: some diverged, grey square: some "
                         "stalled; the step: depth_model_update.csv)")
        lines += ["How far the first updates move the model's output (Wang et al. 2022, Fig. 3): "
                  "‖f(x;θ_t) − f(x;θ_0)‖/‖f(x;θ_0)‖ on the fixed reference batch at the first step after 0 where it was "
                  "measured. Data: `depth_model_update.csv`.", "",
                  "![early model update vs depth](depth_model_update.png)", ""]
    return lines


register_section("depth", order=40, applies=lambda f: not f.searched and swept(f.runs, f.keys, "layers"),
                 write=lambda f, out_dir, echo: depth_section(f.runs, f.keys, out_dir),
                 files=("depth.csv", "depth_sweep.png"), left_out=axis_left_out("critical depth", "layers"))


def _fixed_setting(sweep: Path, key: str):
    """The value a sweep held fixed for a setting it did not search (its boundary.csv has no
    column for it), from the sweep's multirun.yaml; a config group by its option's name. Read as
    plain YAML, nothing resolved (runs.safe_files): a `${...}` there counts as no value."""
    from ...runs import safe_files

    value = None
    if (sweep / "multirun.yaml").is_file():
        try:
            value = safe_files.read_yaml(sweep, "multirun.yaml")
        except (OSError, ValueError) as e:
            raise ReportError(f"{sweep}: its boundary.csv has no {key} column and its multirun.yaml does not read "
                              f"({e}); report this sweep apart from the others (normexp report {sweep})") from None
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
    value = value.get("name") if isinstance(value, dict) else value
    if isinstance(value, str) and "${" in value:
        value = None
    if value is None:
        raise ReportError(f"{sweep}: its boundary.csv has no {key} column and no multirun.yaml says its {key}; "
                         f"report this sweep apart from the others (normexp report {sweep})")
    return value


def read_searches(tables: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(boundary tables, boundary points) of several searches as one of each. A sweep that held
    a setting fixed (`layers=8` beside another sweep's `layers=2,4`) has no column for it; it
    gets its fixed value, so its rows join the other sweeps' lines instead of a line of NaN."""
    frames = [(pd.read_csv(t), pd.read_csv(points_file(t))) for t in tables]
    settings = list(dict.fromkeys(c for table, _ in frames for c in table.columns if c not in RESULT_COLUMNS))
    for t, (table, points) in zip(tables, frames):
        for key in (k for k in settings if k not in table.columns):
            table[key] = points[key] = _fixed_setting(Path(t).parent, key)
    return (pd.concat([f[0] for f in frames], ignore_index=True)[settings + [c for c in frames[0][0].columns
                                                                             if c in RESULT_COLUMNS]],
            pd.concat([f[1] for f in frames], ignore_index=True))


def boundary_section(tables: list[Path], out_dir: Path, echo) -> list[str]:
    """The boundary sweeper's results (boundary.csv and boundary_points.csv of each search under
    the folder): a table, and boundary_search.png (figures.plot_boundary_search)."""
    table, points = read_searches(tables)
    key = str(table["key"].iloc[0])
    setting_cols = [c for c in table.columns if c not in RESULT_COLUMNS]
    label = lambda row: ", ".join(f"{c}={fmt_param(row[c])}" for c in setting_cols) or "all runs"  # noqa: E731
    plot_boundary_search(table, points, key, setting_cols, label, out_dir / "boundary_search.png")
    budget_rows = budget_check_rows(points, setting_cols, key)
    if budget_rows:
        pd.DataFrame(budget_rows).to_csv(out_dir / "budget_check.csv", index=False)
    head = [*setting_cols, "last stable", "first unstable", "ratio", "points", "runs", "monotone", "seeds"]
    two_edges = "upper_edge" in table.columns  # boundary.csv from before the outcome classes has one edge
    if two_edges:
        head += ["upper edge (why)", "upper edge: failure rule", "lower edge: too slow .. learns"]
    gaps = "upper_gap_why" in table.columns  # boundary.csv from before issue 39 names no gap reasons
    checked = gaps and table["upper_budget"].fillna("").astype(str).str.len().any()
    if gaps:
        head += ["wider than the ratio: why"]
    if checked:
        head += ["budget check: upper edge", "budget check: lower edge"]
    rows = [[*(fmt_param(r[c]) for c in setting_cols), _or_word(r["last_stable"], "none"),
             _or_word(r["first_unstable"], "none (upper bound held)"), _or_word(r["ratio"], "-", "{:.2f}"),
             str(r["points_probed"]), str(r["runs_used"]), str(r["monotone"]), str(r["seeds"]),
             *([_edge_cell(r["upper_edge"], r["upper_why"]), row_edge_class(r) or "no edge",
                _lower_cell(r["highest_too_slow"], r["lowest_learning"], r["lower_why"])] if two_edges else []),
             *([_gap_cell(r)] if gaps else []),
             *([_text(r["upper_budget"]) or "-", _text(r["lower_budget"]) or "-"] if checked else [])]
            for r in table.to_dict("records")]
    echo(f"\nboundary of {key} (last stable .. first unstable, every seed learned below):\n" + text_table(head, rows))
    record_lines = record_only_runs(tables)
    for line in record_lines:
        echo(line)
    return [*record_lines, *([""] if record_lines else []), f"## Boundary of {key}", "", f"The largest {key} at which every seed learned (last stable) and the "
            "smallest above it at which some seed did not (first unstable), found by the boundary sweeper's bisection; "
            "monotone = no stable point lies above the first unstable one. Upper edge: what bounded the search from "
            "above (unstable: some seed collapsed or diverged there; stalled: its seeds never learned at a higher "
            "value than one that learned; upper bound: it learned up to the search's upper bound; nothing learned: nothing "
            "learned and nothing was unstable — no stability limit). Lower edge: the largest value below the window "
            "where runs were too slow, and the smallest that learned. A failed run is slow (its last validation losses "
            "still falling beyond their noise), stuck (flat on the unigram plateau), collapsed or diverged; with "
            "nothing learned the gap between slow and stuck or unstable is bisected too (no window: that gap). "
            "Every bracket wider than its ratio says why (search bound reached, no value between, in progress, "
            "search failed). Budget check (hydra.sweeper.budget_check=N): each edge's first failing point rerun "
            "with every seed at N× the steps; an edge whose failures learn there is too slow for the budget, "
            "not a stability limit (the reruns: boundary_points.csv's steps_factor; per seed, beside its outcome in the "
            "search: `budget_check.csv`). " + FAILURE_RULE + " Data: `boundary.csv`, `boundary_points.csv` (every "
            "probed point and seed).", "", markdown_table(head, rows), "",
            f"![boundary of {key}](boundary_search.png)", ""]


def record_only_runs(tables: list[Path]) -> list[str]:
    """A line for each search continued from its record (runs/search_record.py) whose recorded
    runs were trained elsewhere: the boundary tables count them; the run table, runs.csv and
    the loss figures, which read run folders, do not."""
    from ...config.checks import ConfigError
    from ...runs.reading import find_runs
    from ...runs.schema import FINISHED
    from ...runs.search_record import RECORD, SearchRecord
    from ...runs.summary import read_summary

    lines = []
    for folder in dict.fromkeys(Path(t).parent for t in tables):
        if not (folder / RECORD).is_file():
            continue
        try:
            recorded = len(SearchRecord.read(folder / RECORD).runs)
        except ConfigError as e:
            lines.append(f"{e} (the search's record; its tables are read as written)")
            continue
        here = sum((read_summary(r) or {}).get("status") in FINISHED for r in find_runs(folder))
        if recorded > here:
            lines.append(f"{recorded - here} of the {recorded} finished runs in {folder.name}/{RECORD} have no run "
                         "folder here (trained elsewhere; the search continued from its record): the boundary tables "
                         "count them, the run table, runs.csv and the loss figures do not")
    return lines


register_section("boundary", order=10, applies=lambda f: bool(f.searched),
                 write=lambda f, out_dir, echo: boundary_section(f.searched, out_dir, echo),
                 files=("boundary_search.png",))


def depth_law_section(tables: list[Path], out_dir: Path, echo, runs: list[Run] | None = None) -> list[str]:
    """With lr searched at several depths (`layers` a setting key): the depth law (normexp/
    depth_law.py), depth_law.png (its points: depth_law.csv) and depth_law_slopes.csv (the slope table); [] otherwise.
    With each table's boundary_points.csv beside it, also the likelihood fit over every run and, with
    the runs' losses (`runs`, or a loss column in boundary_points.csv), the optimal lr."""
    table, points = read_searches(tables) if all(points_file(t).is_file() for t in tables) else (
        pd.concat([pd.read_csv(t) for t in tables], ignore_index=True), None)
    if str(table["key"].iloc[0]) != "lr" or "layers" not in table.columns or table["layers"].nunique() < 2:
        return []
    line_cols = [c for c in table.columns if c not in RESULT_COLUMNS and c != "layers"]
    if points is not None:
        points = depth_law.with_losses(points, runs, [*line_cols, "layers", "lr"])
    results = depth_law.laws(table, line_cols, points)
    head, rows = depth_law.table_rows(results, line_cols)
    pd.DataFrame([dict(zip(head, r)) for r in rows]).to_csv(out_dir / "depth_law_slopes.csv", index=False)
    depth_law.draw(results, line_cols, out_dir / "depth_law.png", save_figure)
    echo("\ndepth law (max lr that learns within the budget vs depth, log-log fit; 95 % bootstrap over the brackets "
         "and depths; the failure rule's classes and the max stable lr at the right):\n"
         + text_table(head, rows))
    return ["## Depth law", "", FAILURE_RULE, "",
            "The max lr that learns within the budget at each depth (the bracket last stable .. first failing, "
            "kept only where the search found an upper edge above the learning window: a seed collapsed or "
            "diverged, or never learned above an lr that learned; its class by the failure rule is in the columns "
            "at the right, and only the edges classed *stability limit* are limits) against depth, log-log; slope of the "
            "least-squares line through the brackets' geometric middles, its 95 % interval a percentile bootstrap "
            "over the brackets (each limit drawn log-uniformly inside its bracket) and the depths (resampled), 2,000 "
            "resamples; the limit at the shallowest depth and the line's value at 1,000 blocks. Depths without a "
            "limit (nothing learned; upper bound: learned up to the search's bound) are listed, never "
            "fitted. Data: `depth_law_slopes.csv` (this table), `depth_law.csv` (the figure's points).", "",
            *(["Beside it, the likelihood fit: every run of the upper side (from each depth's smallest lr where some "
               "seed learned upwards; depths where no seed learned, or whose upper edge learns at N× the steps — too slow for the budget — left out; the budget check's reruns never enter), seeds as data: a seed's limit at depth L is normal in log lr, c + s·log L + δ_L + σε, each run an "
               "interval-censored observation of it; δ_L ~ N(0, τ²), one per depth shared by its seeds (the depth "
               "scatter), is integrated out per depth. The slope s, the 50 % limit at the shallowest depth and at "
               "1,000 blocks with 95 % profile-likelihood intervals, the threshold J·log(1 + t²/(J−2)) for J depths "
               "(t: Student's 97.5 % point at J−2 df; no interval with 2 depths); σ: the seeds' scatter, τ: the "
               "depths', both in log lr. "
               "The optimal lr: per depth the vertex of a parabola in log lr through the lowest mean final loss "
               "(a run's loss clipped at its initial loss) and its neighbours, its 95 % interval "
               + depth_law.OPTIMUM_INTERVAL + "; ≤/≥: the best mean at the lowest/highest lr tried; its slope: "
               "least squares over the placed "
               "optima, t-interval. Coverage of each interval: docs/results/methods. The failure rule's columns: "
               "the class of each depth's upper edge, how many of the bracketed edges are stability limits, the max "
               "stable lr per depth (≥: no seed collapsed or diverged at any lr probed) and the likelihood slope "
               "over the depths whose edge is a stability limit only.", ""]
              if points is not None else []),
            markdown_table(head, rows), "",
            "![depth law](depth_law.png)", ""]


register_section("depth_law", order=20, applies=lambda f: bool(f.searched),
                 write=lambda f, out_dir, echo: depth_law_section(f.searched, out_dir, echo, f.runs),
                 files=("depth_law_slopes.csv", "depth_law.png"))


def _edge_cell(edge, why) -> str:
    """"unstable (diverged 1)": what bounded the search from above and the seeds' outcomes there."""
    edge = "" if edge != edge or edge is None else str(edge)
    why = "" if why != why or why is None else str(why)
    return f"{edge} ({why})" if why else edge or "-"


def _text(value) -> str:
    return "" if value is None or value != value else str(value)


def _gap_cell(r) -> str:
    """The gap reasons of a row, "-" where both brackets are within their ratio."""
    parts = [f"{edge}: {_text(r[c])}" for edge, c in (("upper", "upper_gap_why"), ("lower", "lower_gap_why"))
             if _text(r[c])]
    gap = _text(r.get("no_window_gap"))
    return "; ".join(parts + ([f"searched gap {gap}"] if gap else [])) or "-"


def _lower_cell(slow, start, why) -> str:
    if start is None or start != start:
        return "-"
    if slow is None or slow != slow:
        return f"learns from the lower bound {start:g}"
    return f"{slow:g} .. {start:g}" + (f" ({why})" if why == why and why else "")


def _or_word(value, word: str, pattern: str = "{:g}") -> str:
    return word if value is None or value != value else pattern.format(value)


def _with_layers(frame: pd.DataFrame, boundary_csv: Path) -> pd.DataFrame:
    """`frame` (a search's boundary.csv or its points) with a layers column: a search at one depth
    writes none, and its depth is the `layers` of the multirun.yaml beside it."""
    if "layers" in frame.columns:
        return frame
    recorded = boundary_csv.parent / "multirun.yaml"
    layers = (read_yaml(recorded.parent, recorded.name) or {}).get("layers") if recorded.is_file() else None
    if not isinstance(layers, int):
        raise ValueError(f"{boundary_csv}: no layers column and no `layers:` in {recorded}; "
                         "a depth-law folder's searches must name their depth")
    return frame.assign(layers=layers)


def refresh_depth_law(folder: Path, echo=print, rewrite: Collection[str] = ()) -> list[Path]:
    """The depth-law table and figure of a committed study folder rewritten from its CSVs alone
    (each search's boundary.csv and boundary_points.csv, and the report's runs.csv for the final
    losses), for when its run folders are gone: depth_law_slopes.csv, depth_law.png (its points:
    depth_law.csv). runs.csv holds no initial loss, so a diverged run enters at its last loss where
    the report clipped it at ℓ₀: every column the folder's depth_law_slopes.csv already has must
    come out as it is, to one unit of its last printed digit (tables.same_columns), or nothing is
    written; `rewrite`: columns whose method changed on purpose, written anew."""
    folder = Path(folder)
    tables = sorted(folder.glob("*/boundary.csv"))
    if not tables or not (folder / "runs.csv").is_file():
        raise ValueError(f"{folder}: needs */boundary.csv and runs.csv (a study folder that `normexp report` wrote)")
    table = pd.concat([_with_layers(pd.read_csv(t), t) for t in tables], ignore_index=True)
    line_cols = [c for c in table.columns if c not in RESULT_COLUMNS and c != "layers"]
    points = pd.concat([_with_layers(pd.read_csv(points_file(t)), t) for t in tables], ignore_index=True)
    if "steps_factor" not in points.columns:  # a search from before the budget check
        points["steps_factor"] = 1
    runs = pd.read_csv(folder / "runs.csv")
    key = [*line_cols, "layers", "lr", "seed"]
    steps = runs["steps"] if "steps" in runs.columns else pd.Series(1, index=runs.index)
    runs = runs.assign(steps_factor=(steps / steps.groupby([runs[k] for k in key]).transform("min")).round().astype(int))
    points = points.merge(runs[[*key, "steps_factor", "final_val_loss"]], on=[*key, "steps_factor"], how="left")
    results = depth_law.laws(table, line_cols, points.rename(columns={"final_val_loss": "loss"}))
    head, rows = depth_law.table_rows(results, line_cols)
    old_path, new_path = folder / "depth_law_slopes.csv", folder / ".depth_law_slopes.new.csv"
    pd.DataFrame(rows, columns=head).to_csv(new_path, index=False)
    try:
        same_columns(old_path, new_path, rewrite)
    except ValueError:
        new_path.unlink()
        raise
    new_path.replace(old_path)
    depth_law.draw(results, line_cols, folder / "depth_law.png", save_figure)
    echo(text_table(head, rows))
    return [old_path, folder / "depth_law.png", folder / "depth_law.csv"]
