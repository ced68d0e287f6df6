"""Seeds as replicates: the statistics `normexp report` draws from a sweep.

Runs that differ only in `seed` are replicates of one *cell* (one setting of the varied
keys). Per cell: n, the mean final validation loss with a 95 % t-interval over seeds
(mean ± t₀.₉₇₅,ₙ₋₁ · s/√n; n = 1 gives no interval), and how many runs diverged, stalled
or failed. A diverged run enters the loss statistics as its loss at initialisation ℓ₀
(summary.json's initial_loss), as Wortsman et al. 2023 do, never dropped; a failed run
(no loss) and a run still going are counted but carry no loss.

LR sensitivity of a setting (the varied keys other than lr and seed; Wortsman et al. 2023
§3): E_η[min(ℓ(η), ℓ₀) − ℓ*] over the swept lr grid, ℓ(η) the mean over seeds of the
final loss at η, ℓ* the best such mean over the grid. Its 95 % interval is a percentile
bootstrap over seeds: resample the seeds within each lr cell with replacement, recompute
(2,000 resamples, a fixed RNG seed, so a report is reproducible). max_stable_lr is the
largest lr at which every seed learned (status completed: finished at least stall_margin
below the unigram baseline). With layers swept, the deepest stack at which every seed
learned is the setting's critical depth.
"""

from __future__ import annotations

import math

import numpy as np

from .runs import Run

REPLICATE_KEYS = ("seed",)
BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 0
# t quantiles t_{0.975, df} for df = 1..30; beyond, a Cornish-Fisher expansion around 1.96
_T975 = (12.706205, 4.302653, 3.182446, 2.776445, 2.570582, 2.446912, 2.364624, 2.306004, 2.262157, 2.228139,
         2.200985, 2.178813, 2.160369, 2.144787, 2.131450, 2.119905, 2.109816, 2.100922, 2.093024, 2.085963,
         2.079614, 2.073873, 2.068658, 2.063899, 2.059539, 2.055529, 2.051831, 2.048407, 2.045230, 2.042272)


def t975(df: int) -> float:
    """The 97.5 % quantile of Student's t with `df` degrees of freedom."""
    if df < 1:
        return math.nan
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


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
    if r.status == "diverged":
        return m.get("initial_loss")
    v = m.get("final_val_loss")
    return v if v is not None and math.isfinite(v) else None


def learned(r: Run) -> bool:
    """Finished and at least stall_margin below the unigram baseline: status completed."""
    return r.status == "completed"


def cell_key(r: Run, keys: list[str]) -> tuple:
    return tuple(r.config.get(k) for k in keys)


def cells(runs: list[Run], keys: list[str]) -> dict[tuple, list[Run]]:
    """Runs grouped by their values of `keys` (seed left out: seeds are replicates)."""
    out: dict[tuple, list[Run]] = {}
    for r in runs:
        out.setdefault(cell_key(r, keys), []).append(r)
    return out


def cell_stats(members: list[Run]) -> dict:
    """n, mean and 95 % t-interval of the loss (diverged = ℓ₀), counts by outcome."""
    losses = [run_loss(r) for r in members]
    mean, low, high = t_interval(losses)
    statuses = [r.status for r in members]
    baselines = [r.summary.get("baseline_loss") for r in members if r.summary.get("baseline_loss") is not None]
    return {"n": len(members), "n_loss": sum(v is not None for v in losses), "mean": mean, "low": low, "high": high,
            "n_diverged": statuses.count("diverged"), "n_stalled": statuses.count("stalled"),
            "n_failed": statuses.count("failed"), "n_learned": sum(map(learned, members)),
            "baseline_loss": float(np.mean(baselines)) if baselines else math.nan,
            "margin_below_baseline": (1 - mean / np.mean(baselines)) if baselines and math.isfinite(mean) else math.nan}


def cell_table(runs: list[Run], keys: list[str], sort_key):
    """A DataFrame: one row per cell of `keys`, with cell_stats' columns."""
    import pandas as pd

    rows = []
    for values, members in sorted(cells(runs, keys).items(), key=lambda kv: [sort_key(v) for v in kv[0]]):
        rows.append({**dict(zip(keys, values)), **cell_stats(members)})
    return pd.DataFrame(rows, columns=[*keys, "n", "n_loss", "mean", "low", "high", "n_diverged", "n_stalled",
                                       "n_failed", "n_learned", "baseline_loss", "margin_below_baseline"])


# ------------------------------------------------------------------ LR sensitivity

def _clipped_losses(members: list[Run]) -> np.ndarray:
    """min(ℓ, ℓ₀) of each seed of one lr cell (runs without a loss left out)."""
    out = []
    for r in members:
        v, l0 = run_loss(r), r.summary.get("initial_loss")
        if v is not None:
            out.append(min(v, l0) if l0 is not None and math.isfinite(l0) else v)
    return np.asarray(out, dtype=float)


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


def largest_learning(members_by_x: dict, ) -> float | None:
    """The largest x whose runs all learned (every seed completed below the baseline)."""
    good = [x for x, members in members_by_x.items() if members and all(map(learned, members))]
    return max(good) if good else None


def sensitivity_table(runs: list[Run], keys: list[str], sort_key):
    """One row per setting (the varied keys other than lr): lr_sensitivity with its bootstrap
    interval, max_stable_lr, n_seeds (the fewest seeds of any lr cell), n_lrs."""
    import pandas as pd

    setting_keys = [k for k in keys if k != "lr"]
    rows = []
    for values, members in sorted(cells(runs, setting_keys).items(), key=lambda kv: [sort_key(v) for v in kv[0]]):
        by_lr = {lr: ms for (lr,), ms in cells(members, ["lr"]).items() if lr is not None}
        grid = [_clipped_losses(by_lr[lr]) for lr in sorted(by_lr)]
        grid = [g for g in grid if len(g)]
        point, (low, high) = (sensitivity_of(grid), bootstrap_sensitivity(grid)) if grid else (math.nan, (math.nan,) * 2)
        rows.append({**dict(zip(setting_keys, values)), "lr_sensitivity": point, "lr_sensitivity_low": low,
                     "lr_sensitivity_high": high, "max_stable_lr": largest_learning(by_lr),
                     "n_seeds": min(len(ms) for ms in by_lr.values()) if by_lr else 0, "n_lrs": len(grid)})
    return pd.DataFrame(rows, columns=[*setting_keys, "lr_sensitivity", "lr_sensitivity_low", "lr_sensitivity_high",
                                       "max_stable_lr", "n_seeds", "n_lrs"])


def early_model_update(r: Run) -> tuple[int, float] | None:
    """(step, value) of DeepNet's model update ‖f(x;θ_t) − f(x;θ_0)‖/‖f(x;θ_0)‖ at the first
    step after 0 where the run measured it (stability/model_update); None without one. How
    far the first updates move the output: Wang et al. 2022 (Fig. 2-3) find it grows with
    depth under Post-LN and stays bounded under DeepNorm."""
    points = [(st, v) for st, v in r.scalars.get("stability/model_update", []) if st > 0 and math.isfinite(v)]
    return points[0] if points else None


def model_update_table(runs: list[Run], keys: list[str], sort_key):
    """Like cell_table, for the early model update: one row per cell of `keys` with the mean
    over seeds, its 95 % t-interval, n, and the step it was read at (the earliest of the cell)."""
    import pandas as pd

    rows = []
    for values, members in sorted(cells(runs, keys).items(), key=lambda kv: [sort_key(v) for v in kv[0]]):
        points = [p for p in map(early_model_update, members) if p is not None]
        mean, low, high = t_interval([v for _, v in points])
        statuses = [r.status for r in members]
        rows.append({**dict(zip(keys, values)), "n": len(points), "mean": mean, "low": low, "high": high,
                     "step": min((st for st, _ in points), default=None), "n_diverged": statuses.count("diverged"),
                     "n_stalled": statuses.count("stalled"), "baseline_loss": math.nan})
    return pd.DataFrame(rows, columns=[*keys, "n", "mean", "low", "high", "step", "n_diverged", "n_stalled",
                                       "baseline_loss"])


def depth_table(runs: list[Run], keys: list[str], sort_key):
    """One row per setting (the varied keys other than layers): the deepest stack at which
    every seed learned (None: none did), the depths tried, n_seeds."""
    import pandas as pd

    setting_keys = [k for k in keys if k != "layers"]
    rows = []
    for values, members in sorted(cells(runs, setting_keys).items(), key=lambda kv: [sort_key(v) for v in kv[0]]):
        by_depth = {d: ms for (d,), ms in cells(members, ["layers"]).items() if d is not None}
        rows.append({**dict(zip(setting_keys, values)), "deepest_learning_layers": largest_learning(by_depth),
                     "depths": " ".join(str(d) for d in sorted(by_depth)),
                     "n_seeds": min(len(ms) for ms in by_depth.values()) if by_depth else 0})
    table = pd.DataFrame(rows, columns=[*setting_keys, "deepest_learning_layers", "depths", "n_seeds"])
    return table.astype({"deepest_learning_layers": "Int64"})  # a whole number, or empty: none learned
