"""Does the lr transfer? Statistics of an lr grid crossed with depth or width (issue 42).

A *transfer grid* is a sweep with lr on a log grid (3 values or more) crossed with a size key —
`layers` (depth transfer: experiment=depth_transfer) or `d_model` (width: experiment=width_proxies)
— at 2 values or more. A *line* is one value of the other varied keys (placement × exponent, or
qk_norm × z_loss); seeds are replicates (study.screen decides which runs enter).

Depth. Per line and depth, from the runs' outcomes (runs/outcomes.py) and clipped final losses
(min(ℓ, ℓ₀), a diverged run counted as ℓ₀, as in the LR sensitivity):

    max lr that learns within the budget
                     the bracket [last stable, first failing]: the largest grid lr at which every
                     seed learned, and the next grid lr above it (where some seed did not). Its
                     upper edge is "unstable" when a seed there collapsed or diverged, "stalled" when
                     they only failed to learn, "upper bound" when the top of the grid learned,
                     "nothing learned" when no lr did: the boundary sweeper's words (boundary.py),
                     so the rows read like boundary.csv; edge_class is the failure rule's word for
                     it (boundary.FAILURE_RULE: a grid has no budget check, so a stall is "not
                     checked", never a stability limit).
    max stable lr    by the failure rule: [stable_low, stable_high], the grid lr below the smallest
                     one at which some seed collapsed or diverged, and that lr (stable_high NaN:
                     none did, the limit is at least stable_low).
    optimal lr       depth_law.optimum: the vertex of the parabola in log lr through the lowest
                     mean loss and its neighbours; its interval: depth_law.OPTIMUM_INTERVAL.

and their slopes against depth are depth_law.laws' fits, unchanged: the bracket bootstrap and the
likelihood fit for the max stable lr, least squares with a t-interval for the optimal lr. A grid
bracket is one grid step wide (×2 for the depth_transfer preset), wider than a search's.

Width. Per line and width: the LR sensitivity (study.sensitivity_table, Wortsman et al. 2023 §3,
t-interval over seeds) and, at the highest lr where no seed diverged, the largest attention logit
(attn_logit_max over blocks at the last logged step) and the output log Z (output/log_z at the last
logged step), mean over seeds with a t-interval: Wortsman's two instability signals.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from ..runs import outcomes
from ..runs.reading import Run
from ..runs.schema import GROUP_TAGS, Status, layer_index, layer_tag_pattern
from . import boundary, depth_law, study

MIN_LRS, MIN_SIZES = 3, 2   # a transfer grid: at least this many lrs, and sizes (depths or widths)
MISSING = "-"               # a line key a setting does not have (depth_mup's exponent beside Pre-LN)
LOG_Z = GROUP_TAGS["output_log_z"]


def is_grid(runs: list[Run], keys: list[str], size_key: str) -> bool:
    """Whether the runs hold an lr grid (MIN_LRS lrs) crossed with `size_key` (MIN_SIZES values)."""
    def count(k):
        return len({r.config.get(k) for r in runs if r.config.get(k) is not None})
    return "lr" in keys and size_key in keys and count("lr") >= MIN_LRS and count(size_key) >= MIN_SIZES


def line_keys(keys: list[str], size_key: str) -> list[str]:
    """The varied keys that make a line: all but lr and the size (and heads, which a width sweep
    ties to d_model)."""
    tied = ("heads",) if size_key == "d_model" else ()
    return [k for k in keys if k not in ("lr", size_key, *tied)]


def same_value(a, b) -> bool:
    """Whether two cells hold one swept value: numbers by value (a run's z_loss 0 is the int 0, a
    table column holding 0 and 1e-4 reads it as 0.0), anything else as written."""
    flags, numbers = (bool, np.bool_), (int, float, np.integer, np.floating)
    if isinstance(a, flags) or isinstance(b, flags):
        return isinstance(a, flags) and isinstance(b, flags) and bool(a) == bool(b)
    if isinstance(a, numbers) and isinstance(b, numbers):
        return float(a) == float(b)
    return repr(a) == repr(b)


def line_value(v):
    """A line key's value as the tables keep it: missing values as MISSING (pandas drops NaN groups)."""
    return MISSING if v is None or (isinstance(v, float) and math.isnan(v)) else v


def grid_points(runs: list[Run], keys: list[str], size_key: str = "layers") -> pd.DataFrame:
    """One row per run that enters the statistics (study.screen: finished, one per seed): the line
    keys, the size, lr, seed, outcome, learned (yes/no: completed below the baseline, as
    study.counts_as_learned) and loss (min(ℓ, ℓ₀); NaN where it has none)."""
    lines = line_keys(keys, size_key)
    rows = []
    for values, members in study.cells(runs, [*lines, size_key, "lr"]).items():
        for r in study.screen(members).kept:
            loss, l0 = study.run_loss(r), r.summary.get("initial_loss")
            if loss is not None and l0 is not None and math.isfinite(l0):
                loss = min(loss, l0)
            rows.append({**{k: line_value(v) for k, v in zip(lines, values[:-2])}, size_key: values[-2],
                         "lr": float(values[-1]), "seed": r.config.get("seed"),
                         "outcome": outcomes.classify(r.summary) or r.status,
                         "learned": "yes" if study.counts_as_learned(r) else "no",
                         "loss": math.nan if loss is None else float(loss)})
    return pd.DataFrame(rows, columns=[*lines, size_key, "lr", "seed", "outcome", "learned", "loss"])


def edges(points: pd.DataFrame, lines: list[str]) -> pd.DataFrame:
    """The max stable lr per line and depth as boundary.csv rows (line keys, layers, key,
    last_stable, first_unstable, upper_edge, lrs): see the module."""
    rows = []
    for key, at in points.groupby([*lines, "layers"], sort=True):
        key = key if isinstance(key, tuple) else (key,)
        by_lr = {lr: g for lr, g in at.groupby("lr", sort=True)}
        learned = [lr for lr, g in by_lr.items() if (g["learned"] == "yes").all()]
        last = max(learned) if learned else math.nan
        above = [lr for lr in by_lr if lr > last] if learned else []
        first = min(above) if above else math.nan
        if not learned:
            edge = "nothing learned"
        elif not above:
            edge = "upper bound"
        else:
            edge = "unstable" if by_lr[first]["outcome"].map(outcomes.is_unstable).any() else "stalled"
        failing = list(by_lr[first]["outcome"].astype(str)) if above else []
        stable_low, stable_high = boundary.stable_bracket({lr: list(g["outcome"].astype(str)) for lr, g in by_lr.items()})
        rows.append({**dict(zip(lines, key[:-1])), "layers": int(key[-1]), "key": "lr", "last_stable": last,
                     "first_unstable": first, "upper_edge": edge, "upper_why": boundary.counts_words(failing),
                     "edge_class": boundary.edge_class(failing) if above else "",
                     "stable_low": stable_low, "stable_high": math.nan if stable_high is None else stable_high,
                     "lrs": len(by_lr), "seeds": int(at.groupby("lr")["seed"].nunique().min())})
    return pd.DataFrame(rows)


def depth_laws(runs: list[Run], keys: list[str]) -> tuple[list[str], pd.DataFrame, list[dict]]:
    """(line keys, the edges table, depth_law.laws' results): per line its max stable lr and
    optimal lr per depth and both slopes, from a depth × lr grid."""
    lines = line_keys(keys, "layers")
    points = grid_points(runs, keys, "layers")
    table = edges(points, lines)
    return lines, table, depth_law.laws(table, lines, points)


def best_grid_lr(points: pd.DataFrame, lines: list[str], size_key: str) -> dict[tuple, float]:
    """{(line..., size): the grid lr of the lowest mean clipped loss over seeds}."""
    means = points.groupby([*lines, size_key, "lr"], sort=True)["loss"].mean().reset_index()
    out = {}
    for key, g in means.groupby([*lines, size_key], sort=True):
        key = key if isinstance(key, tuple) else (key,)
        g = g.dropna(subset=["loss"])
        if len(g):
            out[key] = float(g.loc[g["loss"].idxmin(), "lr"])
    return out


def last_layer_values(r: Run, family: str) -> list[float]:
    """`family`/layer_XX of every block at the last step where all were logged ([] if none)."""
    tags = sorted((t for t in r.scalars if re.fullmatch(layer_tag_pattern(family), t)), key=layer_index)
    if not tags:
        return []
    steps = set.intersection(*(set(s for s, _ in r.scalars[t]) for t in tags))
    if not steps:
        return []
    last = max(steps)
    return [dict(r.scalars[t])[last] for t in tags]


def update_rms_profiles(runs: list[Run], keys: list[str]) -> pd.DataFrame:
    """Per line and depth, at the depth's best grid lr: the optimizer's update RMS of each block at
    the last logged step (update_rms/layer_XX), mean over seeds with a t-interval; the block's
    relative position (index + ½)/L lets depths share an axis. Rows: line keys, layers, lr, block,
    position, n, mean, low, high."""
    lines = line_keys(keys, "layers")
    best = best_grid_lr(grid_points(runs, keys, "layers"), lines, "layers")
    rows = []
    for values, members in study.cells(runs, [*lines, "layers", "lr"]).items():
        key = (*(line_value(v) for v in values[:-1]),)
        if best.get(key) != values[-1]:
            continue
        profiles = [p for p in (last_layer_values(r, "update_rms") for r in study.screen(members).kept) if p]
        depth = int(values[-2])
        for i in range(depth):
            mean, low, high = study.t_interval([p[i] for p in profiles if len(p) == depth])
            if math.isfinite(mean):
                rows.append({**dict(zip(lines, key[:-1])), "layers": depth, "lr": values[-1], "block": i,
                             "position": (i + 0.5) / depth, "n": sum(len(p) == depth for p in profiles),
                             "mean": mean, "low": low, "high": high})
    return pd.DataFrame(rows, columns=[*lines, "layers", "lr", "block", "position", "n", "mean", "low", "high"])


def instability_signals(r: Run) -> tuple[float, float]:
    """(largest attention logit over blocks, output log Z), both at the last logged step; NaN if
    not logged."""
    logits = [v for v in last_layer_values(r, "attn_logit_max") if math.isfinite(v)]
    log_z = r.last(LOG_Z)
    return (max(logits) if logits else math.nan,
            float(log_z) if log_z is not None and math.isfinite(log_z) else math.nan)


def width_table(runs: list[Run], keys: list[str], sort_key) -> pd.DataFrame:
    """One row per line (variant) and width: LR sensitivity with its t-interval over seeds
    (study.sensitivity_table), max stable lr, the lrs where some seed diverged, the highest lr
    where none did, and there the largest attention logit and output log Z (mean over seeds,
    t-interval)."""
    lines = line_keys(keys, "d_model")
    sens = study.sensitivity_table(runs, keys, sort_key)
    rows = []
    for values, members in sorted(study.cells(runs, [*lines, "d_model"]).items(),
                                  key=lambda kv: [sort_key(v) for v in kv[0]]):
        by_lr = {lr: study.screen(ms).kept for (lr,), ms in study.cells(members, ["lr"]).items() if lr is not None}
        diverged = sorted(lr for lr, kept in by_lr.items() if any(r.status == Status.DIVERGED for r in kept))
        calm = [lr for lr, kept in by_lr.items() if kept and lr not in diverged]
        top = max(calm) if calm else math.nan
        signals = [instability_signals(r) for r in by_lr.get(top, [])]
        logit = study.t_interval([s[0] for s in signals])
        log_z = study.t_interval([s[1] for s in signals])
        mine = sens
        for k, v in zip([*lines, "d_model"], values):
            mine = mine[mine[k].map(lambda cell: same_value(cell, v))]
        s = mine.iloc[0] if len(mine) else {}
        rows.append({**{k: line_value(v) for k, v in zip(lines, values[:-1])}, "d_model": values[-1],
                     "heads": members[0].config.get("heads"),
                     "lr_sensitivity": s.get("lr_sensitivity", math.nan),
                     "lr_sensitivity_low": s.get("lr_sensitivity_low", math.nan),
                     "lr_sensitivity_high": s.get("lr_sensitivity_high", math.nan),
                     **{k: s.get(k, math.nan) for k in study.CALM_COLUMNS},
                     "max_stable_lr": s.get("max_stable_lr", math.nan),
                     "diverged_lrs": " ".join(f"{lr:g}" for lr in diverged),
                     "highest_calm_lr": top, "n": len(signals),
                     "attn_logit_max": logit[0], "attn_logit_max_low": logit[1], "attn_logit_max_high": logit[2],
                     "log_z": log_z[0], "log_z_low": log_z[1], "log_z_high": log_z[2]})
    return pd.DataFrame(rows)


def signals_by_lr(runs: list[Run], keys: list[str], sort_key) -> pd.DataFrame:
    """The two instability signals against lr: one row per line, width and lr, mean over the kept
    seeds with a t-interval, and how many diverged (a diverged run's last logged values are from
    before it blew up)."""
    lines = line_keys(keys, "d_model")
    rows = []
    for values, members in sorted(study.cells(runs, [*lines, "d_model", "lr"]).items(),
                                  key=lambda kv: [sort_key(v) for v in kv[0]]):
        kept = study.screen(members).kept
        signals = [instability_signals(r) for r in kept]
        logit, log_z = study.t_interval([s[0] for s in signals]), study.t_interval([s[1] for s in signals])
        rows.append({**{k: line_value(v) for k, v in zip(lines, values[:-2])}, "d_model": values[-2], "lr": values[-1],
                     "n": len(kept), "n_diverged": sum(r.status == Status.DIVERGED for r in kept),
                     "attn_logit_max": logit[0], "attn_logit_max_low": logit[1], "attn_logit_max_high": logit[2],
                     "log_z": log_z[0], "log_z_low": log_z[1], "log_z_high": log_z[2]})
    return pd.DataFrame(rows)
