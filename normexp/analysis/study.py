"""Seeds as replicates: the statistics `normexp report` draws from a sweep.

Runs that differ only in `seed` are replicates of one *cell* (one setting of the varied
keys). Which runs of a cell are replicates (`screen`): only finished runs (completed,
stalled, diverged) and one per seed. A run still going, killed, interrupted or requeued
has no final number yet, a failed one has none at all, a malformed summary.json is not
trusted, nor is one that says completed or stalled beside a final loss that is no finite number
(NaN, Infinity): each is left out of every statistic (means, counts, max stable lr, critical depth,
the transfer tables), with its reason. Two finished runs of one setting with the same
seed are one replicate, not two: the newest (by its summary.json's time) is kept. Per cell:
n (the runs in the mean), the mean final validation loss with a 95 % t-interval over seeds
(mean ± t₀.₉₇₅,ₙ₋₁ · s/√n; one seed gives no interval, even where a pooled cell holds several runs), how many diverged, stalled or failed,
and how many were left out and why. A diverged run enters as its loss at initialisation ℓ₀
(summary.json's initial_loss), as Wortsman et al. 2023 do; one that diverged before it had
a finite loss has no ℓ₀: it is left out of the mean (said so), but still counts as a run
that did not learn.

LR sensitivity of a setting (the varied keys other than lr and seed; Wortsman et al. 2023
§3): E_η[min(ℓ(η), ℓ₀) − ℓ*] over the swept lr grid, ℓ(η) the mean over seeds of the
final loss at η, ℓ* the best such mean over the grid. Its 95 % interval is a percentile
t-interval over seeds (`seed_sensitivity`): seed k's share is d_k = mean_η ℓ_k(η) − ℓ_k(η*),
η* the lr of the best mean, so mean_k d_k is the sensitivity itself and the interval is
mean ± t₀.₉₇₅,ₙ₋₁ · s_d/√n (a seed is one draw of the whole lr curve; with 3 seeds a
bootstrap has only 10 distinct resamples and no small-sample correction, and its intervals
were 2–3× too narrow; it is still written beside, lr_sensitivity_boot_low/high: resample the
seeds within each lr cell, 2,000 resamples, a fixed RNG seed). It holds η* fixed at the
best mean; its coverage is measured by scripts/coverage.py (docs/results/methods/). Beside it,
lr_sensitivity_calm (`calm_sensitivity`): the same over the lrs at which no seed diverged, so that
a diverged run's ℓ₀ does not carry it. max_stable_lr is the
largest lr at which every seed learned (status completed: finished at least stall_margin
below the unigram baseline). With layers swept, the deepest stack at which every seed
learned is the setting's critical depth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
from scipy import stats

from ..runs.reading import Run
from ..runs.schema import FINISHED, MODEL_UPDATE, Status, is_execution_setting

REPLICATE_KEYS = ("seed",)
BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 0


def t975(df: int) -> float:
    """The 97.5 % quantile of Student's t with `df` degrees of freedom (scipy.stats.t)."""
    return float(stats.t.ppf(0.975, df)) if df >= 1 else math.nan


def t_interval(values) -> tuple[float, float, float]:
    """(mean, low, high): the 95 % t-interval of the mean; (mean, nan, nan) for one value."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if len(x) == 0:
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if len(x) < 2:
        return mean, math.nan, math.nan
    half = t975(len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))
    return mean, mean - half, mean + half


def run_loss(r: Run) -> float | None:
    """The loss a run enters the statistics with: final validation loss; ℓ₀ (initial_loss)
    if it diverged; None if it has none (failed, or no value yet)."""
    m = r.metrics()
    v = m.get("initial_loss") if r.status == Status.DIVERGED else m.get("final_val_loss")
    return v if v is not None and math.isfinite(v) else None


def counts_as_learned(r: Run) -> bool:
    """Whether the statistics count a run as learned: status completed (finished at least
    stall_margin below the unigram baseline, see runs.summary.beat_baseline)."""
    return r.status == Status.COMPLETED


def cell_key(r: Run, keys: list[str]) -> tuple:
    return tuple(r.config.get(k) for k in keys)


def cells(runs: list[Run], keys: list[str]) -> dict[tuple, list[Run]]:
    """Runs grouped by their values of `keys` (seed left out: seeds are replicates)."""
    out: dict[tuple, list[Run]] = {}
    for r in runs:
        out.setdefault(cell_key(r, keys), []).append(r)
    return out


@dataclass
class Screened:
    """A cell's runs sorted for the statistics (see `screen`)."""

    kept: list[Run] = field(default_factory=list)       # finished, one per seed: learned or not
    losses: list[float] = field(default_factory=list)   # the loss of each kept run that has one
    entered: list[Run] = field(default_factory=list)    # ... and those runs: the mean's n
    left_out: list[tuple[Run, str, str]] = field(default_factory=list)  # (run, short reason, why)

    def left_out_text(self) -> str:
        """"1 killed, 1 duplicate seed": how many were left out of the mean, by reason."""
        counts: dict[str, int] = {}
        for _, short, _ in self.left_out:
            counts[short] = counts.get(short, 0) + 1
        return ", ".join(f"{n} {short}" for short, n in counts.items())


def setting_identity(r: Run) -> tuple:
    """Everything that makes a run what it computes: its config but how it ran (EXECUTION_SETTINGS),
    by value: runs.reading.load_config canonicalizes once (grad_clip=1 and 1.0, a default and the same
    value given explicitly, are one setting), and cells group by the same values."""
    return tuple(sorted((k, repr(v)) for k, v in r.config.items() if not is_execution_setting(k)))


def unfinished_reason(r: Run) -> tuple[str, str] | None:
    """(short, why) a run has no final number to pool, or None if it finished."""
    status = r.status
    if status in FINISHED:
        return None
    if status == Status.FAILED:
        return Status.FAILED, "failed: it has no loss (counted as failed, never as a loss)"
    if status == Status.MALFORMED:
        return Status.MALFORMED, (f"{r.problem}; its numbers are not read (fix or remove that file: the run's events "
                             "and checkpoints are untouched)")
    if status == Status.UNKNOWN:
        return "no summary", "no summary.json yet: nothing to pool"
    return status, f"{status}: unfinished, its last loss is not a final one"


def untrusted_reason(r: Run) -> tuple[str, str] | None:
    """(short, why) a finished run's summary cannot be believed, or None: its status says it
    completed or stalled but its final_val_loss is no finite number (NaN, Infinity: written by
    hand, or a bug). Its status was judged from that number, so it counts neither as a loss nor
    as a run that learned. A diverged run needs no final loss (it enters as ℓ₀)."""
    if r.status in FINISHED and r.status != Status.DIVERGED and run_loss(r) is None:
        return "no final loss", (f"status {r.status} but its final_val_loss is {r.metrics().get('final_val_loss')}, "
                                 "not a finite number: left out of every statistic (fix or remove its summary.json)")
    return None


def screen(members: list[Run]) -> Screened:
    """Which runs of a cell enter the statistics. Unfinished, failed and malformed runs, and
    finished ones without a finite final loss (`untrusted_reason`), are left out; of several
    finished runs with one setting and seed the newest is kept (by summary.json's modification
    time, then path), the others left out as duplicates; a kept run without a loss (diverged
    before any finite loss: no ℓ₀) is left out of the mean only, and still counts as a run
    that did not learn."""
    out, newest = Screened(), {}
    for r in members:
        reason = unfinished_reason(r) or untrusted_reason(r)
        if reason:
            out.left_out.append((r, *reason))
            continue
        key = setting_identity(r)
        if key not in newest or _age(r) > _age(newest[key]):
            newest[key] = r
    for r in members:
        keeper = newest.get(setting_identity(r))
        if r.status not in FINISHED or keeper is None or untrusted_reason(r):
            continue
        if r is not keeper:
            out.left_out.append((r, "duplicate seed", f"same setting and seed {r.config.get('seed')} as {keeper.rel}, "
                                 "which finished later and is kept: one seed is one replicate"))
            continue
        out.kept.append(r)
        loss = run_loss(r)
        if loss is None and r.status == Status.DIVERGED:
            out.left_out.append((r, "no initial loss", "diverged before its first finite loss, so it has no ℓ₀ "
                                 "to count as: left out of the mean (which is then too low), counted as diverged"))
        else:
            out.losses.append(loss)
            out.entered.append(r)
    return out


def _age(r: Run) -> tuple:
    try:
        mtime = (r.path / "summary.json").stat().st_mtime_ns
    except OSError:
        mtime = -1
    return mtime, r.rel


def cell_stats(members: list[Run]) -> dict:
    """n (the runs in the mean), mean and 95 % t-interval of the loss (diverged = ℓ₀), counts
    by outcome of the kept runs, failed runs, and the runs left out of the mean and why."""
    sc = screen(members)
    mean, low, high = t_interval(sc.losses)
    if len({repr(r.config.get("seed")) for r in sc.entered}) < 2:  # an interval over seeds needs two seeds
        low = high = math.nan
    statuses = [r.status for r in sc.kept]
    baselines = [b for r in sc.kept if isinstance(b := r.summary.get("baseline_loss"), (int, float)) and math.isfinite(b)]
    return {"n": len(sc.losses), "mean": mean, "low": low, "high": high,
            "n_diverged": statuses.count(Status.DIVERGED), "n_stalled": statuses.count(Status.STALLED),
            "n_failed": sum(r.status == Status.FAILED for r in members), "n_learned": sum(map(counts_as_learned, sc.kept)),
            "n_left_out": len(sc.left_out), "left_out": sc.left_out_text(),
            "baseline_loss": float(np.mean(baselines)) if baselines else math.nan,
            "margin_below_baseline": (1 - mean / np.mean(baselines)) if baselines and math.isfinite(mean) else math.nan}


CELL_COLUMNS = ["n", "mean", "low", "high", "n_diverged", "n_stalled", "n_failed", "n_learned", "n_left_out",
                "left_out", "baseline_loss", "margin_below_baseline"]


def cell_table(runs: list[Run], keys: list[str], sort_key):
    """A DataFrame: one row per cell of `keys`, with cell_stats' columns."""
    rows = []
    for values, members in sorted(cells(runs, keys).items(), key=lambda kv: [sort_key(v) for v in kv[0]]):
        rows.append({**dict(zip(keys, values)), **cell_stats(members)})
    return pd.DataFrame(rows, columns=[*keys, *CELL_COLUMNS])


# ------------------------------------------------------------------ LR sensitivity

def _clipped_by_seed(members: list[Run]) -> dict:
    """{seed: min(ℓ, ℓ₀)} of each seed of one lr cell that enters the statistics (see `screen`)."""
    out = {}
    for r in screen(members).entered:
        v, l0 = run_loss(r), r.summary.get("initial_loss")
        out[r.config.get("seed")] = min(v, l0) if l0 is not None and math.isfinite(l0) else v
    return out


def seed_sensitivity(by_seed: list[dict]) -> tuple[float, float, float]:
    """(point, low, high): LR sensitivity with its 95 % t-interval over seeds. `by_seed` holds
    one {seed: clipped loss} per lr. Seed k's share d_k = mean_η ℓ_k(η) − ℓ_k(η*), η* the lr of
    the lowest mean over all seeds, so the d_k average to the sensitivity of the seeds present at
    every lr; the interval is t_interval(d_k) (NaN with fewer than 2 such seeds)."""
    seeds = set.intersection(*(set(g) for g in by_seed)) if by_seed else set()
    if not seeds:
        return math.nan, math.nan, math.nan
    grid = np.array([[g[k] for k in sorted(seeds, key=repr)] for g in by_seed])  # lr × seed
    best = int(np.argmin(grid.mean(axis=1)))
    return t_interval(grid.mean(axis=0) - grid[best])


def sensitivity_of(grid: list[np.ndarray]) -> float:
    """E_η[m(η) − ℓ*] with m(η) the mean of each lr cell's clipped losses, ℓ* = min_η m(η)."""
    means = np.array([g.mean() for g in grid])
    return float(np.mean(means - means.min()))


def bootstrap_sensitivity(grid: list[np.ndarray], samples: int = BOOTSTRAP_SAMPLES,
                          seed: int = BOOTSTRAP_SEED) -> tuple[float, float]:
    """Percentile 95 % interval of sensitivity_of, resampling the seeds of each lr cell."""
    if min(len(g) for g in grid) < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    draws = [g[rng.integers(0, len(g), size=(samples, len(g)))].mean(axis=1) for g in grid]
    means = np.stack(draws, axis=1)  # samples × lr
    values = (means - means.min(axis=1, keepdims=True)).mean(axis=1)
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def calm_sensitivity(by_seed: list[dict], diverged: list[bool]) -> tuple[float, float, float, int]:
    """(point, low, high, lr cells used): the LR sensitivity over the lrs at which no seed diverged
    (`diverged`, one flag per entry of `by_seed`), with seed_sensitivity's t-interval. Beside the
    full measure, where a diverged run counts at ℓ₀ and a few diverged lrs can carry most of the
    value, this one asks how flat the loss is over the lrs that trained."""
    calm = [g for g, d in zip(by_seed, diverged) if not d]
    if len(calm) < 2:
        return math.nan, math.nan, math.nan, len(calm)
    return (*seed_sensitivity(calm), len(calm))


def largest_learning(members_by_x: dict) -> float | None:
    """The largest x whose runs all learned: every seed that finished (one run per seed, see
    `screen`) completed below the baseline, and at least one did."""
    good = [x for x, members in members_by_x.items()
            if (kept := screen(members).kept) and all(map(counts_as_learned, kept))]
    return max(good) if good else None


def _left_out_over(groups) -> tuple[int, str]:
    """(count, "1 killed, 2 duplicate seed") of the runs left out over several cells."""
    total = Screened()
    for members in groups:
        total.left_out += screen(members).left_out
    return len(total.left_out), total.left_out_text()


def sensitivity_table(runs: list[Run], keys: list[str], sort_key):
    """One row per setting (the varied keys other than lr): lr_sensitivity with its t-interval
    over seeds (`seed_sensitivity`) and, for comparison, its bootstrap interval, max_stable_lr, n_seeds (the fewest
    seeds in the statistics of any lr cell it used), n_lrs (the lr cells it used: those with a run in the
    statistics), and the runs left out of them (n_left_out, left_out: see `screen`)."""
    setting_keys = [k for k in keys if k != "lr"]
    rows = []
    for values, members in sorted(cells(runs, setting_keys).items(), key=lambda kv: [sort_key(v) for v in kv[0]]):
        by_lr = {lr: ms for (lr,), ms in cells(members, ["lr"]).items() if lr is not None}
        by_seed = [g for g in (_clipped_by_seed(by_lr[lr]) for lr in sorted(by_lr)) if g]
        grid = [np.asarray(list(g.values()), dtype=float) for g in by_seed]
        point, (boot_low, boot_high) = (sensitivity_of(grid), bootstrap_sensitivity(grid)) if grid else (math.nan, (math.nan,) * 2)
        _, low, high = seed_sensitivity(by_seed)
        with_runs = [lr for lr in sorted(by_lr) if _clipped_by_seed(by_lr[lr])]
        calm = calm_sensitivity(by_seed, [any(r.status == Status.DIVERGED for r in screen(by_lr[lr]).kept)
                                          for lr in with_runs])
        n_out, why = _left_out_over(by_lr.values())
        rows.append({**dict(zip(setting_keys, values)), "lr_sensitivity": point, "lr_sensitivity_low": low,
                     "lr_sensitivity_high": high, "lr_sensitivity_boot_low": boot_low,
                     "lr_sensitivity_boot_high": boot_high, "max_stable_lr": largest_learning(by_lr),
                     "n_seeds": min(map(len, by_seed)) if by_seed else 0,
                     "n_lrs": len(grid), "n_left_out": n_out, "left_out": why,
                     **dict(zip(CALM_COLUMNS, calm))})
    return pd.DataFrame(rows, columns=[*setting_keys, "lr_sensitivity", "lr_sensitivity_low", "lr_sensitivity_high",
                                       "lr_sensitivity_boot_low", "lr_sensitivity_boot_high", "max_stable_lr", "n_seeds",
                                       "n_lrs", "n_left_out", "left_out", *CALM_COLUMNS])


CALM_COLUMNS = ("lr_sensitivity_calm", "lr_sensitivity_calm_low", "lr_sensitivity_calm_high", "n_lrs_calm")


def early_model_update(r: Run) -> tuple[int, float] | None:
    """(step, value) of DeepNet's model update ‖f(x;θ_t) − f(x;θ_0)‖/‖f(x;θ_0)‖ at the first
    step after 0 where the run measured it (stability/model_update); None without one. How
    far the first updates move the output: Wang et al. 2022 (Fig. 2-3) find it grows with
    depth under Post-LN and stays bounded under DeepNorm."""
    points = [(st, v) for st, v in r.scalars.get(MODEL_UPDATE, []) if st > 0 and math.isfinite(v)]
    return points[0] if points else None


def model_update_table(runs: list[Run], keys: list[str], sort_key):
    """Like cell_table, for the early model update: one row per cell of `keys` with the mean
    over seeds, its 95 % t-interval, n, and the step it was read at (the earliest of the cell).
    Like every statistic, it reads only the runs `screen` keeps (finished, one per seed)."""
    rows = []
    for values, members in sorted(cells(runs, keys).items(), key=lambda kv: [sort_key(v) for v in kv[0]]):
        members = screen(members).kept
        points = [p for p in map(early_model_update, members) if p is not None]
        mean, low, high = t_interval([v for _, v in points])
        statuses = [r.status for r in members]
        rows.append({**dict(zip(keys, values)), "n": len(points), "mean": mean, "low": low, "high": high,
                     "step": min((st for st, _ in points), default=None), "n_diverged": statuses.count(Status.DIVERGED),
                     "n_stalled": statuses.count(Status.STALLED), "baseline_loss": math.nan})
    return pd.DataFrame(rows, columns=[*keys, "n", "mean", "low", "high", "step", "n_diverged", "n_stalled",
                                       "baseline_loss"])


def depth_table(runs: list[Run], keys: list[str], sort_key):
    """One row per setting (the varied keys other than layers): the deepest stack at which
    every seed learned (None: none did), the depths it used (those with a finished run, see
    `screen`), n_seeds (the fewest finished seeds of any of them), and the runs left out."""
    setting_keys = [k for k in keys if k != "layers"]
    rows = []
    for values, members in sorted(cells(runs, setting_keys).items(), key=lambda kv: [sort_key(v) for v in kv[0]]):
        by_depth = {d: ms for (d,), ms in cells(members, ["layers"]).items() if d is not None}
        n_out, why = _left_out_over(by_depth.values())
        used = {d: kept for d, ms in by_depth.items() if (kept := screen(ms).kept)}
        rows.append({**dict(zip(setting_keys, values)), "deepest_learning_layers": largest_learning(by_depth),
                     "depths": " ".join(str(d) for d in sorted(used)),
                     "n_seeds": min(map(len, used.values())) if used else 0,
                     "n_left_out": n_out, "left_out": why})
    table = pd.DataFrame(rows, columns=[*setting_keys, "deepest_learning_layers", "depths", "n_seeds", "n_left_out",
                                        "left_out"])
    return table.astype({"deepest_learning_layers": "Int64"})  # a whole number, or empty: none learned
