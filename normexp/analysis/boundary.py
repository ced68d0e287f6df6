"""Boundary search: the learning window along one key, to a ratio, instead of to a grid step.

For one setting (placement × init × depth ..., every swept key but the searched one and the
seed), a `Search` looks along one key — `lr` or `layers`, on a log scale — for where runs
learn. Each seed's run has an outcome (normexp/runs/outcomes.py: learned, never_learned,
collapsed, diverged); a point is *stable* when every seed learned, *unstable* when some seed
collapsed or diverged, *slow* otherwise (some seed never got going, none was unstable).
Along lr, learning happens in a window: below it the runs are too slow for the budget, above
it they are unstable. The search finds both edges:

    initial    `initial_points` log-spaced from lower to upper, bounds included
    upper edge (last stable, first unstable): the first failing point above the window's start
               (the smallest stable point) and the largest stable point below it; bisected
               (geometric midpoint) until first unstable / last stable ≤ ratio
    lower edge (highest too slow, lowest learning): the largest point below the window's
               start and the start; bisected until ≤ lower_ratio (default: ratio)
    no window  nothing learned: the midpoint of the largest slow point below the smallest
               unstable one is probed, to ratio (a window, if any, lies between)

boundary.csv says per setting which edge bounded the search from above (upper_edge:
unstable / stalled / upper bound / nothing learned / no window / unstable everywhere) and the
seeds' outcomes there (upper_why): a failure that never learned is never reported as unstable,
and a setting where nothing learned has no stability limit. A point's class comes from its seeds'
curves (normexp/runs/outcomes.py): unstable (a seed collapsed or diverged), stuck (a seed sat flat
on the unigram plateau), slow (its seeds were still falling, or never_learned in an old summary).
With no learning point the gap between the largest slow point and the smallest stuck or unstable
one above it is bisected to `ratio` (a window, if any, lies between): "nothing learned" is said
only where every point was still falling (the window lies above `upper`).

Every row says why a gap is wider than its ratio (upper_gap_why, lower_gap_why: search bound
reached, no value between, in progress, search failed); an empty reason means bracketed.

Budget check (`budget_check` = N ≥ 2, the sweeper's hydra.sweeper.budget_check; 0 = off): when
a search is done, each edge's first failing point (the upper edge's first unstable, the lower
edge's highest too slow; with no window, the two ends of the searched gap) is run again with every
seed at N× the steps (warmup and decay scaled alike, by the sweeper). A point that learns there
(every seed) failed for want of steps: its edge is "too slow for the budget", never a stability
limit (upper_edge says so); one that still fails holds at N× the budget. A point where some seed
collapsed or diverged is not rerun: that is a stability failure already. boundary_points.csv holds
the reruns (steps_factor N), upper_budget / lower_budget the verdicts.

Stability need not be monotone in the key (DeepNorm learned at 96 blocks but not at 48), so
every point and its outcome is kept, and a stable point above the first unstable one marks the
search `monotone = False`, never hidden.

Two schedules run the searches (normexp/launch/boundary_schedule.py, next to the sweeper that
uses them): in rounds, or as slots free up. Both probe the same points for the same outcomes;
`record` takes each run's result into its search.

A failed job (bad input, a crash) is not an outcome: its search stops as "failed" with the
error, so a typo never becomes a boundary. The Hydra sweeper that launches the runs is
hydra_plugins/normexp_boundary_sweeper; this module is pure Python and is tested by hand.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..runs import outcomes
from ..runs.outcomes import LEARNED
from ..runs.schema import FINISHED
from ..config.checks import is_number
from ..data.files import atomic_write_bytes

SEARCHABLE = {"lr": False, "layers": True}  # key -> whole numbers?
HIGH_FAILURES = ("unstable", "stuck")          # point classes of a failure above a window
TOO_SLOW_FOR_THE_BUDGET = "too slow for the budget"


# ---------------------------------------------------------------- the failure rule
#
# One rule, fixed before the runs, for every table that names an edge. A run that does not
# learn either lost what it had learned or blew up (collapsed, diverged: unstable), or never got
# going (slow, stuck): only the first is a stability failure. A stall can be the budget's (the
# runs learn at a few times the steps) or something else; only the budget check tells.

STABILITY_LIMIT = "stability limit"     # some seed collapsed or diverged at the edge's failing lr
SPEED_EDGE = "speed edge"               # its seeds only stalled, and every seed learned at ×N steps
STALL_NOT_CHECKED = "stall, not checked"  # its seeds only stalled, and no budget check ran there
STALL_AT_N = "stall at ×N too"          # its seeds only stalled, and still did not all learn at ×N
EDGE_CLASSES = (STABILITY_LIMIT, SPEED_EDGE, STALL_NOT_CHECKED, STALL_AT_N)
FAILURE_RULE = (
    "The failure rule (fixed before the runs; normexp/analysis/boundary.py, `edge_class`): an upper edge's "
    "first failing lr is a *stability limit* when some seed collapsed or diverged there (at the search's "
    "budget or in the budget check), a *speed edge* when its seeds were only slow or stuck and every seed "
    "learned at ×N the steps (the budget check, N = 2 or 4); a stall with no budget check is *not checked*, "
    "one that still fails at ×N without a collapse is *a stall at ×N too*: neither is a stability limit. "
    "Two quantities per depth, never one under the other's name: the *max lr that learns within the "
    "budget* (the largest lr at which every seed learned .. the first failing lr above it, whatever its "
    "class) and the *max stable lr* (the largest lr probed below the smallest lr at which some seed "
    "collapsed or diverged .. that lr; ≥ the largest lr probed where no seed did).")


def edge_class(search_outcomes, budget_outcomes=(), factor: int = 0) -> str:
    """The failure rule's class of one failing lr (see FAILURE_RULE): `search_outcomes` are its
    seeds' outcomes at the search's budget, `budget_outcomes` at `factor`× the steps (the budget
    check; empty where it did not run)."""
    search_outcomes, budget_outcomes = list(search_outcomes), list(budget_outcomes)
    if any(outcomes.is_unstable(o) for o in [*search_outcomes, *budget_outcomes]):
        return STABILITY_LIMIT
    if not budget_outcomes:
        return STALL_NOT_CHECKED
    if all(o == LEARNED for o in budget_outcomes):
        return f"{SPEED_EDGE} (learns at ×{factor})"
    return STALL_AT_N.replace("N", str(factor))


def is_stability_limit(edge: str) -> bool:
    """Whether an edge_class word is a stability limit (the other classes carry ×N in their words)."""
    return edge == STABILITY_LIMIT


def stable_bracket(by_lr: dict) -> tuple:
    """The max stable lr by the failure rule from {lr: [every seed's outcome there, at any budget]}:
    (the largest lr below the smallest one where some seed collapsed or diverged, that lr), or
    (the largest lr probed, None) where none did: the limit is at least that lr."""
    unstable = sorted(lr for lr, seen in by_lr.items() if any(outcomes.is_unstable(o) for o in seen))
    if not unstable:
        return (max(by_lr) if by_lr else None), None
    below = [lr for lr in by_lr if lr < unstable[0]]
    return (max(below) if below else None), unstable[0]


def bracket_words(low, high, at_least: str = "≥ {:.3g}") -> str:
    """"0.04 .. 0.0462", "≥ 0.3" (no failure above) or "< 3e-4" (failing from the lowest lr probed)."""
    if low is None or low != low:
        return "-" if high is None or high != high else f"< {high:.3g}"
    return at_least.format(low) if high is None or high != high else f"{low:.3g} .. {high:.3g}"


def _outcome_list(counts) -> list[str]:
    """["collapsed", "learned", "learned"] from boundary.csv's words "collapsed 1, learned 2"."""
    out = []
    for word in _text(counts).split(", "):
        name, _, n = word.rpartition(" ")
        out += [name] * int(n) if name and n.isdigit() else []
    return out


def _text(value) -> str:
    """A CSV cell as text: "" for a missing one (None, NaN)."""
    return "" if value is None or value != value else str(value)


def row_edge_class(row: dict) -> str | None:
    """edge_class of a boundary.csv row's upper edge (its first failing lr), read from the row's
    own words (upper_why: the seeds there; upper_budget: the budget check); None where the row has
    no upper edge above a learning lr (nothing learned, no window, upper bound, failed)."""
    low, high = row.get("last_stable"), row.get("first_unstable")
    if low is None or high is None or low != low or high != high or str(row.get("upper_edge")) == "failed":
        return None
    budget = _text(row.get("upper_budget"))  # "learns at ×4 steps at 0.03 (learned 3): …", "fails at ×2 …"
    factor = int(budget.split("×", 1)[1].split(" ", 1)[0]) if "×" in budget else 0
    checked = _outcome_list(budget.rsplit("(", 1)[1].split(")", 1)[0]) if "(" in budget else []
    search = _outcome_list(row.get("upper_why"))
    if str(row.get("upper_edge")) == "unstable" and not any(map(outcomes.is_unstable, search)):
        search.append(outcomes.COLLAPSED)   # a row from before upper_why: its edge said unstable
    return edge_class(search, checked, factor)


def budget_check_rows(points, setting_cols: list[str], key: str) -> list[dict]:
    """The budget check per seed, one row per rerun point and seed (boundary_points rows): the
    setting, the value, the seed's outcome in the search (steps ×1; "-" where that seed was not
    run there: the point was decided without it) and at N× the steps. [] without reruns."""
    if "steps_factor" not in points.columns:
        return []
    reruns = points[points["steps_factor"].astype(int) > 1]
    search = {tuple(str(r[c]) for c in [*setting_cols, key, "seed"]): r["outcome"]
              for r in at_search_budget(points).to_dict("records")}
    return [{**{c: r[c] for c in setting_cols}, key: r[key], "seed": r["seed"],
             "outcome at ×1": search.get(tuple(str(r[c]) for c in [*setting_cols, key, "seed"]), "-"),
             "steps factor": int(r["steps_factor"]), "outcome at ×N": r["outcome"]}
            for r in reruns.to_dict("records")]


def at_search_budget(points):
    """boundary_points rows (a DataFrame) of the search itself, without the budget check's reruns
    (steps_factor > 1: the same lr and seed at N× the steps, a different experiment); all rows
    of a file from before the budget check (no steps_factor column)."""
    if "steps_factor" not in points.columns:
        return points
    return points[points["steps_factor"].astype(int) == 1]


def _point_class(seeds: dict) -> str:
    """A point's class from its seeds' outcomes (Search.point_class)."""
    seeds = seeds.values()
    if all(o == LEARNED for o in seeds):
        return LEARNED
    if any(outcomes.is_unstable(o) for o in seeds):
        return "unstable"
    return "stuck" if any(o == outcomes.STUCK for o in seeds) else "slow"


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
class BoundaryResult:
    """The result columns of a boundary.csv row, in their order (the setting's own columns come
    first): the one list of them; the report tells setting from result by RESULT_COLUMNS."""

    key: str                          # the searched key (lr, layers)
    last_stable: float | None         # the largest value at which every seed learned
    first_unstable: float | None      # the smallest above it at which some seed did not
    ratio: float | None               # first_unstable / last_stable: the bracket's width
    verdict: str
    points_probed: int
    runs_used: int
    monotone: str                     # yes: no stable point above the first unstable one
    seeds: int
    upper_edge: str                   # what bounded the search from above
    upper_why: str                    # the seeds' outcomes at first_unstable
    lowest_learning: float | None     # the lower edge: the smallest value that learned
    highest_too_slow: float | None    # and the largest below it where runs were too slow
    lower_edge: str
    lower_why: str
    runs_skipped: int                 # seeds not run: their point was decided without them
    lower_gap: float | None           # lowest_learning / highest_too_slow: the lower bracket's width
    no_window_gap: str                # nothing learned: the searched gap "slow .. stuck/unstable"
    upper_gap_why: str                # why the upper bracket is wider than ratio ("": it is not)
    lower_gap_why: str                # why the lower bracket is wider than lower_ratio ("": it is not)
    upper_budget: str                 # the budget check at the upper edge's failing point ("": off)
    lower_budget: str                 # ... at the lower edge's
    budget_runs: int                  # runs of the budget check


RESULT_COLUMNS = tuple(f.name for f in fields(BoundaryResult))


@dataclass
class Search:
    """The search along one key for one setting; `outcomes[x]` holds each seed's outcome at x
    (normexp.runs.outcomes: learned, never_learned, collapsed, diverged)."""

    setting: tuple                                # ((key, value), ...) of the other swept keys
    lower: float
    upper: float
    ratio: float
    integer: bool = False
    lower_ratio: float | None = None              # the lower edge's precision (None: `ratio`)
    outcomes: dict = field(default_factory=dict)  # x -> {seed: outcome}
    runs: int = 0
    skipped: int = 0                              # seeds not run: the point was decided without them
    error: str | None = None                      # a job failed: no outcome, the search stops
    budget_check: int = 0                         # N: rerun each edge's failing point at N× steps (0: off)
    budget: dict = field(default_factory=dict)    # x -> {seed: outcome at N× steps}
    budget_runs: int = 0

    def stable(self, x) -> bool:
        """Every seed run at x learned."""
        return all(o == LEARNED for o in self.outcomes[x].values())

    def point_class(self, x) -> str:
        """learned (every seed), unstable (some seed collapsed or diverged), stuck (some seed
        flat on the plateau, none unstable), else slow (its failing seeds still falling, or
        never_learned: an old summary's undivided name)."""
        return _point_class(self.outcomes[x])

    def window_start(self):
        """The smallest point where every seed learned (None: none did): the window's anchor."""
        learned = [x for x in self.outcomes if self.stable(x)]
        return min(learned) if learned else None

    def bracket(self) -> tuple:
        """The upper edge: (last stable, first unstable). First unstable = the smallest point
        above the window's start where some seed did not learn; last stable = the largest
        learning point below it. With no learning point: (None, the smallest point probed that
        failed)."""
        start = self.window_start()
        failed = [x for x in self.outcomes if not self.stable(x)]
        if start is None:
            return None, (min(failed) if failed else None)
        above = [x for x in failed if x > start]
        first_unstable = min(above) if above else None
        below = [x for x in self.outcomes if self.stable(x) and (first_unstable is None or x < first_unstable)]
        return max(below), first_unstable

    def lower_bracket(self) -> tuple:
        """The lower edge: (the largest failing point below the window, the window's start)."""
        start = self.window_start()
        if start is None:
            return None, None
        below = [x for x in self.outcomes if x < start]  # all failed: start is the smallest learning point
        return (max(below) if below else None), start

    def empty_window(self) -> tuple:
        """With no learning point: (the largest slow point below the smallest stuck or unstable
        one, that point), between which a window could lie — too slow below, too high above;
        (None, None) with a learning point or no high failure (slow everywhere)."""
        if self.window_start() is not None:
            return None, None
        high = [x for x in self.outcomes if self.point_class(x) in HIGH_FAILURES]
        if not high:
            return None, None
        slow = [x for x in self.outcomes if self.point_class(x) == "slow" and x < min(high)]
        return (max(slow) if slow else None), min(high)

    @property
    def monotone(self) -> bool:
        """No stable point above the first unstable one."""
        _, first_unstable = self.bracket()
        return first_unstable is None or not any(self.stable(x) for x in self.outcomes if x > first_unstable)

    def next_points(self) -> list:
        """The values to probe next (the upper edge's midpoint, the lower edge's, or, with no
        learning point yet, the midpoint between slow and stuck or unstable); [] when done."""
        if self.error is not None or not self.outcomes:
            return []
        low, high = self.bracket()
        points = []
        if low is not None and high is not None and high / low > self.ratio:
            points.append(midpoint(low, high, self.integer))
        slow, start = self.lower_bracket()
        if slow is not None and start / slow > (self.lower_ratio or self.ratio):
            points.append(midpoint(slow, start, self.integer))
        slow, unstable = self.empty_window()
        if slow is not None and unstable / slow > self.ratio:
            points.append(midpoint(slow, unstable, self.integer))
        points += [midpoint(a, b, self.integer) for a, b in self.stuck_gaps()]
        return [x for x in points if x is not None and x not in self.outcomes]

    def stuck_gaps(self) -> list[tuple]:
        """With nothing learned and no slow point (stuck everywhere): the gaps between neighbouring
        probed points, the lower one stuck, wider than the lower edge's ratio. A run that has not
        left the plateau by the end of a short budget looks stuck even where it is only slow, so a
        window can hide between two stuck points (DeepNorm at 16 blocks learned at 1.73e-3 between
        stuck 3e-4 and 3e-3); one narrower than that ratio can still hide (upper_gap_why says so)."""
        if self.window_start() is not None or self.empty_window()[0] is not None or not self.outcomes:
            return []
        xs = sorted(self.outcomes)
        return [(a, b) for a, b in zip(xs, xs[1:])
                if self.point_class(a) == "stuck" and b / a > (self.lower_ratio or self.ratio)]

    def verdict(self) -> str:
        """none / ≥ upper / the upper edge's bracket / failed, in words."""
        if self.error is not None:
            return f"failed: {self.error}"
        low, high = self.bracket()
        if low is None:
            return "none"
        if high is None:
            return f">= {low:g}"
        return f"{low:g} .. {high:g}"

    def upper_edge(self) -> str:
        """What bounded the search from above (boundary.csv's upper_edge):
        unstable     the first failure above the window had a seed collapse or diverge: a stability limit
        stalled      it had only seeds that never learned (stuck or slow: upper_why says which), at
                     an lr above one that learned
        too slow for the budget  that failure (stalled, or no window's upper end) learned with
                     every seed at budget_check× the steps: no stability limit at all
        upper bound  every point from the window's start up to `upper` learned: the limit is ≥ upper
        nothing learned  nothing learned, every point still falling (slow): the window, if any,
                     lies above `upper`; never a stability limit
        no window    nothing learned: slow below, stuck or unstable above, the gap searched
                     (no_window_gap; upper_gap_why says why it is wider than `ratio`, if it is)
        unstable everywhere / stuck everywhere  nothing learned and no point down to `lower`
                     was slow (every failure unstable / some stuck)
        failed       a job failed (see verdict)"""
        if self.error is not None:
            return "failed"
        if not self.outcomes:
            return ""
        low, high = self.bracket()
        if low is None:
            classes = {self.point_class(x) for x in self.outcomes}
            if not classes & set(HIGH_FAILURES):
                return "nothing learned"
            if "slow" not in classes:
                return "unstable everywhere" if classes == {"unstable"} else "stuck everywhere"
            edge = "no window"
            high = self.empty_window()[1]
        elif high is None:
            return "upper bound"
        else:
            edge = "unstable" if self.point_class(high) == "unstable" else "stalled"
        return TOO_SLOW_FOR_THE_BUDGET if self._learns_with_budget(high) else edge

    def lower_edge(self) -> str:
        """too slow (a point below the window never learned), lower bound (the window reaches
        `lower`), stuck below / unstable below (non-monotone), or empty without a window."""
        slow, start = self.lower_bracket()
        if start is None:
            return ""
        if slow is None:
            return "lower bound"
        return {"slow": "too slow", "stuck": "stuck below"}.get(self.point_class(slow), "unstable below")

    def _gap_why(self, low, high, ratio) -> str:
        """Why (low, high) is wider than ratio, or "" where it is not."""
        if high / low <= ratio:
            return ""
        if self.error is not None:
            return "search failed"
        if midpoint(low, high, self.integer) is None:
            return "no value between"
        return "in progress"

    def upper_gap_why(self) -> str:
        """Why the upper bracket (or, with nothing learned, the searched gap) is wider than
        `ratio`: search bound reached / no value between / in progress / search failed; "" when
        it is not."""
        if not self.outcomes:
            return "in progress"
        low, high = self.bracket()
        if low is None:
            slow, high = self.empty_window()
            if high is None:
                return "search failed" if self.error else "search bound reached: no failure above the slow points up to upper"
            if slow is None:
                if self.error:
                    return "search failed"
                if self.stuck_gaps():
                    return "in progress"
                return ("search bound reached: no slow point down to lower"
                        + (f"; stuck everywhere, each gap searched to ×{self.lower_ratio or self.ratio:g}"
                           if self.point_class(min(self.outcomes)) == "stuck" else ""))
            return self._gap_why(slow, high, self.ratio)
        if high is None:
            return "search bound reached: learns up to upper"
        return self._gap_why(low, high, self.ratio)

    def lower_gap_why(self) -> str:
        """The lower edge's: why lowest learning / highest too slow is wider than lower_ratio."""
        slow, start = self.lower_bracket()
        if start is None:
            return ""  # no window: the upper edge's reason covers the setting
        if slow is None:
            return "search bound reached: learns down to lower"
        return self._gap_why(slow, start, self.lower_ratio or self.ratio)

    # ---------------------------------------------------------------- the budget check

    def budget_points(self) -> dict:
        """{edge: x}: each edge's first failing point to rerun at budget_check× the steps
        (upper: the first unstable, or the no-window gap's upper end; lower: the highest too
        slow, or the gap's lower end); none where budget_check is off, the search is not done,
        or the point is unstable (a seed collapsed or diverged: a stability failure already)."""
        if self.budget_check < 2 or self.error is not None or not self.outcomes or self.next_points():
            return {}
        if self.window_start() is None:
            upper_x, lower_x = self.empty_window()[1], self.empty_window()[0]
        else:
            upper_x, lower_x = self.bracket()[1], self.lower_bracket()[0]
        return {edge: x for edge, x in (("upper", upper_x), ("lower", lower_x))
                if x is not None and self.point_class(x) != "unstable"}

    def budget_jobs(self, seeds) -> list:
        """[(x, seed)] of the budget check not yet run: every seed at each budget point."""
        return [(x, seed) for x in dict.fromkeys(self.budget_points().values()) for seed in seeds
                if seed not in self.budget.get(x, {})]

    def _learns_with_budget(self, x) -> bool:
        runs = self.budget.get(x)
        return bool(runs) and all(o == LEARNED for o in runs.values())

    def budget_verdict(self, edge: str) -> str:
        """The budget check's word on one edge ("" when off): learns at ×N (too slow for the
        budget), fails at ×N (a limit at N× the budget too), not rerun (unstable), or pending."""
        if self.budget_check < 2:
            return ""
        if self.window_start() is None:
            x = self.empty_window()[1 if edge == "upper" else 0]
        else:
            x = self.bracket()[1] if edge == "upper" else self.lower_bracket()[0]
        if x is None:
            return "no failing point"
        if self.point_class(x) == "unstable":
            return "not rerun: unstable"
        runs = self.budget.get(x)
        if not runs:
            return "pending"
        n = f"×{self.budget_check} steps at {x:g} ({_counts(runs)})"
        return f"learns at {n}: {TOO_SLOW_FOR_THE_BUDGET}" if self._learns_with_budget(x) else f"fails at {n}"

    def why(self, x) -> str:
        """The seeds' outcomes at x in words: "never_learned 2, collapsed 1"."""
        if x is None or x not in self.outcomes:
            return ""
        return _counts(self.outcomes[x])

    def _no_window_gap(self) -> str:
        slow, high = self.empty_window()
        return f"{slow:g} .. {high:g}" if slow is not None and high is not None else ""

    def row(self, key: str) -> dict:
        """boundary.csv's row: the setting's own columns, then the RESULT_COLUMNS."""
        low, high = self.bracket()
        slow, start = self.lower_bracket()
        result = BoundaryResult(key=key, last_stable=low, first_unstable=high,
                                ratio=(high / low) if low and high else None, verdict=self.verdict(),
                                points_probed=len(self.outcomes), runs_used=self.runs,
                                monotone="yes" if self.monotone else "no",
                                seeds=max((len(o) for o in self.outcomes.values()), default=0),
                                upper_edge=self.upper_edge(), upper_why=self.why(high),
                                lowest_learning=start, highest_too_slow=slow, lower_edge=self.lower_edge(),
                                lower_why=self.why(slow), runs_skipped=self.skipped,
                                lower_gap=(start / slow) if slow and start else None,
                                no_window_gap=self._no_window_gap(), upper_gap_why=self.upper_gap_why(),
                                lower_gap_why=self.lower_gap_why(), upper_budget=self.budget_verdict("upper"),
                                lower_budget=self.budget_verdict("lower"), budget_runs=self.budget_runs)
        return {**dict(self.setting), **asdict(result)}


def _counts(seeds: dict) -> str:
    """Seeds' outcomes in words: "never_learned 2, collapsed 1"."""
    return counts_words(seeds.values())


def counts_words(seen) -> str:
    """Outcomes in words, counted: "collapsed 1, learned 2" (boundary.csv's upper_why)."""
    counts: dict = {}
    for o in seen:
        counts[o] = counts.get(o, 0) + 1
    return ", ".join(f"{o} {n}" for o, n in sorted(counts.items()))


def outcome_of(summary: dict) -> str | None:
    """A finished run's outcome: the one its summary recorded, read again from its curve where
    that is the old undivided never_learned (a summary from before slow and stuck)."""
    recorded = summary.get("outcome")
    if recorded in (None, outcomes.NEVER_LEARNED):
        return outcomes.classify(summary) or recorded
    return recorded


def record(search: Search, x, seed, summary, steps_factor: int = 1) -> None:
    """One job's result into its search: a finished run is an outcome (outcome_of: learned =
    status completed); anything else (a failed job: no summary, or status failed) stops the
    search. steps_factor > 1: a budget-check run, kept apart in search.budget."""
    status = summary.get("status") if isinstance(summary, dict) else None
    if steps_factor > 1:
        search.budget_runs += 1
    else:
        search.runs += 1
    if status in FINISHED:
        (search.budget if steps_factor > 1 else search.outcomes).setdefault(x, {})[seed] = outcome_of(summary)
    elif search.error is None:
        why = summary.get("error") if isinstance(summary, dict) else None
        check = f" (budget check, ×{steps_factor} steps)" if steps_factor > 1 else ""
        search.error = f"at {x:g}, seed={seed}{check}: {why or status or 'the job failed (see its train.log)'}"


def grid_runs(lower, upper, ratio: float, seeds: int, integer: bool) -> int:
    """Runs a log grid of the same precision (neighbours at most `ratio` apart) would use."""
    steps = math.ceil(math.log(upper / lower) / math.log(ratio) - 1e-9)
    points = len({rounded(lower * (upper / lower) ** (i / steps), integer) for i in range(steps + 1)})
    return points * seeds


# The tables a finished search leaves, and the ones a search writes while it runs. A running
# (or resumed) search knows only the points it has reached so far, so it writes its progress
# beside the finished tables, never over them: a resume killed in its first minute leaves the
# finished sweep's tables as they were.
TABLE, POINTS = "boundary.csv", "boundary_points.csv"
PROGRESS_TABLE, PROGRESS_POINTS = "boundary_progress.csv", "boundary_points_progress.csv"


def points_file(table: Path) -> Path:
    """The boundary_points file that goes with a boundary table (finished or progress)."""
    table = Path(table)
    return table.with_name(PROGRESS_POINTS if table.name == PROGRESS_TABLE else POINTS)


def sweep_tables(found_tables: list[Path], found_progress: list[Path]) -> tuple[list[Path], list[Path]]:
    """(tables to read, of which in progress): each sweep folder's boundary.csv, or its
    boundary_progress.csv where no search there has finished yet."""
    finished = {t.parent for t in found_tables}
    running = [t for t in found_progress if t.parent not in finished]
    return sorted([*found_tables, *running]), sorted(running)


def write_tables(searches: list[Search], key: str, folder: Path, finished: bool = True) -> tuple[Path, Path]:
    """boundary.csv (one row per setting) and boundary_points.csv (every probed point and seed),
    each written atomically. `finished=False` (after each run or round): the progress files
    instead, so the tables of a finished sweep stay whole until its resume has finished too; the
    finished write removes them."""
    folder = Path(folder)
    rows = [s.row(key) for s in searches]
    columns = list(dict.fromkeys(k for r in rows for k in r))
    names = (TABLE, POINTS) if finished else (PROGRESS_TABLE, PROGRESS_POINTS)
    table, points = folder / names[0], folder / names[1]
    _write(table, columns, rows)
    point_rows = [{**dict(s.setting), key: x, "seed": seed, "learned": "yes" if o == LEARNED else "no", "outcome": o,
                   "steps_factor": factor}
                  for s in searches for factor, table_ in ((1, s.outcomes), (s.budget_check, s.budget))
                  for x in sorted(table_) for seed, o in sorted(table_[x].items())]
    _write(points, list(dict.fromkeys(k for r in point_rows for k in r))
           or [key, "seed", "learned", "outcome", "steps_factor"], point_rows)
    if finished:
        for name in (PROGRESS_TABLE, PROGRESS_POINTS):
            (folder / name).unlink(missing_ok=True)
    return table, points


def _write(path: Path, columns: list[str], rows: list[dict]) -> None:
    text = io.StringIO(newline="")
    w = csv.DictWriter(text, fieldnames=columns)
    w.writeheader()
    w.writerows({k: "" if r.get(k) is None else r.get(k) for k in columns} for r in rows)
    atomic_write_bytes(path, text.getvalue().encode())  # a kill mid-write leaves the old file whole


SCHEDULES = ("async", "rounds")


def check_settings(key, lower, upper, ratio, initial_points, lower_ratio=None, schedule="async",
                   parallel=None, budget_check=0, max_hours=None) -> str | None:
    """One line naming what is wrong with the sweeper's own settings, or None."""
    number = is_number
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
    if lower_ratio is not None and (not number(lower_ratio) or lower_ratio <= 1):
        return f"hydra.sweeper.lower_ratio={lower_ratio}: must be null (= ratio) or a number > 1"
    if schedule not in SCHEDULES:
        return f"hydra.sweeper.schedule={schedule}: must be one of {', '.join(SCHEDULES)}"
    if parallel is not None and (not isinstance(parallel, int) or isinstance(parallel, bool) or parallel < 1):
        return f"hydra.sweeper.parallel={parallel}: must be null (the launcher's n_jobs) or a whole number >= 1"
    if not isinstance(budget_check, int) or isinstance(budget_check, bool) or budget_check < 0 or budget_check == 1:
        return (f"hydra.sweeper.budget_check={budget_check}: must be 0 (off) or a whole number >= 2 "
                "(the steps factor of the rerun, e.g. 4)")
    if max_hours is not None and (not number(max_hours) or max_hours <= 0):
        return f"hydra.sweeper.max_hours={max_hours}: must be null (no limit) or a number of hours > 0, e.g. 3.5"
    if max_hours is not None and schedule != "async":
        return f"hydra.sweeper.max_hours={max_hours}: needs hydra.sweeper.schedule=async (a round cannot stop midway)"
    return None


def summary_lines(searches: list[Search], key: str, seeds: int, rounds: int | None, schedule: dict | None = None) -> list[str]:
    """What the sweep prints at its end: one line per setting (the upper edge's bracket and
    what bounded it, the lower edge), the runs against a grid, and the schedule's busy fraction."""
    used = sum(s.runs for s in searches)
    how = f"{rounds} rounds" if rounds is not None else "as slots free up"
    lines = [f"boundary of {key} ({how}, {seeds} seeds): last stable .. first unstable [upper edge; lower edge]"]
    for s in searches:
        label = ", ".join(f"{k}={v}" for k, v in s.setting) or "(one setting)"
        flag = "" if s.monotone else "  NOT MONOTONE: a stable point lies above the first unstable one"
        slow, start = s.lower_bracket()
        lower = f"; too slow at {slow:g}, learns from {start:g}" if slow is not None else ""
        skipped = f", {s.skipped} skipped" if s.skipped else ""
        gap = f"; searched gap {s._no_window_gap()}" if s._no_window_gap() else ""
        wide = "; ".join(f"{edge} wider than its ratio: {why}" for edge, why in
                         (("upper", s.upper_gap_why()), ("lower", s.lower_gap_why())) if why)
        budget = "; ".join(f"budget check, {edge} edge: {v}" for edge, v in
                           (("upper", s.budget_verdict("upper")), ("lower", s.budget_verdict("lower"))) if v)
        lines.append(f"  {label}: {s.verdict()} [{s.upper_edge()}{(': ' + s.why(s.bracket()[1])) if s.bracket()[1] else ''}"
                     f"{lower}{gap}] ({len(s.outcomes)} points, {s.runs} runs{skipped}){flag}")
        lines += [f"    {text}" for text in (wide, budget) if text]
    checks = sum(s.budget_runs for s in searches)
    if checks:
        lines.append(f"budget check: {checks} runs at ×{searches[0].budget_check} steps")
    if searches:
        s = searches[0]
        grid = grid_runs(s.lower, s.upper, s.ratio, seeds, s.integer) * len(searches)
        lines.append(f"{used} runs; a grid of the same precision (×{s.ratio:g} steps from {s.lower:g} to "
                     f"{s.upper:g}) would take {grid}")
    if schedule:
        served = schedule.get("runs_from_record")
        lines.append(f"schedule: {schedule['runs']} runs on {schedule['slots']} slots in {schedule['wall_seconds']:.0f} s, "
                     f"busy {schedule['busy_seconds']:.0f} s: busy fraction {schedule['busy_fraction']}"
                     + (f" ({served} of the runs taken from the search's record, not trained)" if served else ""))
    return lines
