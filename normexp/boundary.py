"""Boundary search: where a setting stops learning, to a ratio, instead of to a grid step.

For one setting (placement × init × warmup ..., every swept key but the searched one and the
seed), a `Search` looks along one key — `lr` or `layers`, on a log scale — for the boundary
between "every seed learned" (status completed: finished `stall_margin` below the unigram
baseline, not diverged, not stalled) and "some seed did not":

    round 0   the initial points: `initial_points` log-spaced from lower to upper, bounds included
              (lower fails → "none"; upper holds → "≥ upper"; no bisection needed)
    round k   the geometric midpoint of the bracket (last stable, first unstable)
    done      when first unstable / last stable ≤ ratio (or, for whole numbers, adjacent)

The bracket is read from every probed point: first unstable = the smallest unstable point,
last stable = the largest stable point below it. Stability need not be monotone in the key
(DeepNorm learned at 96 blocks but not at 48), so every point and its outcome is kept, and a
stable point above the first unstable one marks the search `monotone = False`, never hidden.

A failed job (bad input, a crash) is not an outcome: its search stops as "failed" with the
error, so a typo never becomes a boundary. The Hydra sweeper that launches the rounds is
hydra_plugins/normexp_boundary_sweeper; this module is pure Python and is tested by hand.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

from .runfolder import FINISHED

SEARCHABLE = {"lr": False, "layers": True}  # key -> whole numbers?


def rounded(x: float, integer: bool) -> float | int:
    """A probe value as it is written into a run's name: a whole number, or 3 significant digits."""
    return max(1, round(x)) if integer else float(f"{x:.3g}")


def initial_points(lower, upper, n: int, integer: bool) -> list:
    """n log-spaced points from lower to upper, both included, rounded, without repeats."""
    if n < 2:
        raise ValueError("initial_points must be at least 2 (the two bounds)")
    ratio = upper / lower
    points = [rounded(lower * ratio ** (i / (n - 1)), integer) for i in range(n)]
    points[0], points[-1] = lower, upper  # the bounds exactly as given
    return sorted(set(points))


def midpoint(low, high, integer: bool):
    """The geometric midpoint of (low, high), rounded; None if no value lies strictly between."""
    m = rounded(math.sqrt(low * high), integer)
    if integer and not low < m < high:
        m = (low + high) // 2
    return m if low < m < high else None


@dataclass
class Search:
    """The search along one key for one setting; `outcomes[x]` holds each seed's outcome at x:
    True learned, False did not."""

    setting: tuple                                # ((key, value), ...) of the other swept keys
    lower: float
    upper: float
    ratio: float
    integer: bool = False
    outcomes: dict = field(default_factory=dict)  # x -> {seed: bool}
    runs: int = 0
    error: str | None = None                      # a job failed: no outcome, the search stops

    def stable(self, x) -> bool:
        return all(self.outcomes[x].values())

    def bracket(self) -> tuple:
        """(last stable, first unstable) from every probed point; None where there is none."""
        unstable = [x for x in self.outcomes if not self.stable(x)]
        first_unstable = min(unstable) if unstable else None
        below = [x for x in self.outcomes if self.stable(x) and (first_unstable is None or x < first_unstable)]
        return (max(below) if below else None), first_unstable

    @property
    def monotone(self) -> bool:
        """No stable point above the first unstable one."""
        _, first_unstable = self.bracket()
        return first_unstable is None or not any(self.stable(x) for x in self.outcomes if x > first_unstable)

    def next_point(self):
        """The next value to probe, or None when the search is done."""
        if self.error is not None or not self.outcomes:
            return None
        low, high = self.bracket()
        if low is None or high is None or high / low <= self.ratio:
            return None
        return midpoint(low, high, self.integer)

    def verdict(self) -> str:
        """none / ≥ upper / the bracket / failed, in words."""
        if self.error is not None:
            return f"failed: {self.error}"
        low, high = self.bracket()
        if low is None:
            return "none"
        if high is None:
            return f">= {low:g}"
        return f"{low:g} .. {high:g}"

    def row(self, key: str) -> dict:
        low, high = self.bracket()
        return {**dict(self.setting), "key": key, "last_stable": low, "first_unstable": high,
                "ratio": (high / low) if low and high else None, "verdict": self.verdict(),
                "points_probed": len(self.outcomes), "runs_used": self.runs,
                "monotone": "yes" if self.monotone else "no",
                "seeds": min((len(o) for o in self.outcomes.values()), default=0)}


def record(search: Search, x, seed, summary) -> None:
    """One job's result into its search: a finished run is an outcome (learned = status
    completed); anything else (a failed job: no summary, or status failed) stops the search."""
    search.runs += 1
    status = summary.get("status") if isinstance(summary, dict) else None
    if status in FINISHED:
        search.outcomes.setdefault(x, {})[seed] = status == "completed"
    elif search.error is None:
        why = summary.get("error") if isinstance(summary, dict) else None
        search.error = f"at {x:g}, seed={seed}: {why or status or 'the job failed (see its train.log)'}"


def search_all(searches: list[Search], seeds: list, first_points: list, launch, after_round=None) -> int:
    """Run every search to its end. Each round asks `launch` for one batch: [(search index, x,
    seed)] -> [summary dict or None] in the same order (the sweeper's launcher; a stand-in in
    the tests). Round 0 probes `first_points`, later rounds each unfinished search's midpoint.
    `after_round(k)` is called after each round. Returns the number of rounds."""
    k = 0
    while True:
        batch = [(i, x, seed) for i, s in enumerate(searches)
                 for x in (first_points if k == 0 else [s.next_point()]) if x is not None for seed in seeds]
        if k > 0:  # a search that stopped on an error launches nothing more
            batch = [(i, x, seed) for i, x, seed in batch if searches[i].error is None]
        if not batch:
            return k
        for (i, x, seed), summary in zip(batch, launch(batch)):
            record(searches[i], x, seed, summary)
        k += 1
        if after_round:
            after_round(k)


def grid_runs(lower, upper, ratio: float, seeds: int, integer: bool) -> int:
    """Runs a log grid of the same precision (neighbours at most `ratio` apart) would use."""
    steps = math.ceil(math.log(upper / lower) / math.log(ratio) - 1e-9)
    points = len({rounded(lower * (upper / lower) ** (i / steps), integer) for i in range(steps + 1)})
    return points * seeds


def write_tables(searches: list[Search], key: str, folder: Path) -> tuple[Path, Path]:
    """boundary.csv (one row per setting) and boundary_points.csv (every probed point and seed)."""
    folder = Path(folder)
    rows = [s.row(key) for s in searches]
    columns = list(dict.fromkeys(k for r in rows for k in r))
    table, points = folder / "boundary.csv", folder / "boundary_points.csv"
    _write(table, columns, rows)
    point_rows = [{**dict(s.setting), key: x, "seed": seed, "learned": "yes" if ok else "no"}
                  for s in searches for x in sorted(s.outcomes) for seed, ok in sorted(s.outcomes[x].items())]
    _write(points, list(dict.fromkeys(k for r in point_rows for k in r)) or [key, "seed", "learned"], point_rows)
    return table, points


def _write(path: Path, columns: list[str], rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows({k: "" if r.get(k) is None else r.get(k) for k in columns} for r in rows)


def check_settings(key, lower, upper, ratio, initial_points) -> str | None:
    """One line naming what is wrong with the sweeper's own settings, or None."""
    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    if key not in SEARCHABLE:
        return f"hydra.sweeper.key={key}: the boundary sweeper searches {' or '.join(SEARCHABLE)}"
    if not (number(lower) and number(upper) and 0 < lower < upper):
        return (f"hydra.sweeper.lower={lower}, hydra.sweeper.upper={upper}: need two finite numbers "
                "0 < lower < upper")
    if SEARCHABLE[key] and not (float(lower).is_integer() and float(upper).is_integer()):
        return f"hydra.sweeper.lower={lower}, hydra.sweeper.upper={upper}: {key} takes whole numbers"
    if not number(ratio) or ratio <= 1:
        return f"hydra.sweeper.ratio={ratio}: must be a number > 1 (1.25 = the boundary to within 25 %)"
    if not isinstance(initial_points, int) or isinstance(initial_points, bool) or initial_points < 2:
        return f"hydra.sweeper.initial_points={initial_points}: must be a whole number >= 2 (the two bounds)"
    return None


def summary_lines(searches: list[Search], key: str, seeds: int, rounds: int) -> list[str]:
    """What the sweep prints at its end: one line per setting, and the runs against a grid."""
    used = sum(s.runs for s in searches)
    lines = [f"boundary of {key} ({rounds} rounds, {seeds} seeds): last stable .. first unstable"]
    for s in searches:
        label = ", ".join(f"{k}={v}" for k, v in s.setting) or "(one setting)"
        flag = "" if s.monotone else "  NOT MONOTONE: a stable point lies above the first unstable one"
        lines.append(f"  {label}: {s.verdict()} ({len(s.outcomes)} points, {s.runs} runs){flag}")
    if searches:
        s = searches[0]
        grid = grid_runs(s.lower, s.upper, s.ratio, seeds, s.integer) * len(searches)
        lines.append(f"{used} runs; a grid of the same precision (×{s.ratio:g} steps from {s.lower:g} to "
                     f"{s.upper:g}) would take {grid}")
    return lines
