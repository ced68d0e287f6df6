"""The report's verdict: which settings learned, stalled or diverged, and where the data do not
separate them, in plain words with n. It is read from the same statistics as the settings table
(study.cells and study.cell_stats: only the replicates study.screen keeps, never a run it left out),
each run's word its outcome as runs.csv writes it (tables.outcome_of)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...runs.outcomes import DIVERGED, LEARNED
from ...runs.reading import Run
from .. import study
from .tables import display_name, fmt_param, outcome_of, sort_key

LEARNED_GROUP, STALLED_GROUP, DIVERGED_GROUP = "learned", "stalled", "diverged"
MIXED_GROUP, NO_RUN_GROUP = "seeds disagree", "no finished run"


@dataclass
class Setting:
    """One row of the settings table, as the verdict reads it."""

    label: str
    n: int                                             # the runs in the mean (the table's n)
    mean: float
    low: float
    high: float
    outcomes: list[str] = field(default_factory=list)  # of the kept replicates, in run order
    diverged_at: list = field(default_factory=list)    # the step each diverged one stopped at
    left_out: str = ""                                 # the table's "left out" text

    @property
    def group(self) -> str:
        """learned / stalled / diverged when every replicate agrees; seeds disagree; no finished run."""
        if not self.outcomes:
            return NO_RUN_GROUP
        if all(o == LEARNED for o in self.outcomes):
            return LEARNED_GROUP
        if all(o == DIVERGED for o in self.outcomes):
            return DIVERGED_GROUP
        if not any(o in (LEARNED, DIVERGED) for o in self.outcomes):
            return STALLED_GROUP  # slow, stuck, collapsed, never_learned: status stalled
        return MIXED_GROUP

    @property
    def has_interval(self) -> bool:
        return math.isfinite(self.low) and math.isfinite(self.high)


def setting_label(keys: list[str], values: tuple) -> str:
    return ", ".join(f"{display_name(k)}={fmt_param(v)}" for k, v in zip(keys, values)) or "all runs"


def settings(runs: list[Run], keys: list[str]) -> list[Setting]:
    """Every setting (runs that differ only in seed), in the settings table's order."""
    out = []
    for values, members in sorted(study.cells(runs, keys).items(), key=lambda kv: [sort_key(v) for v in kv[0]]):
        stats, kept = study.cell_stats(members), study.screen(members).kept
        out.append(Setting(setting_label(keys, values), stats["n"], stats["mean"], stats["low"], stats["high"],
                           [outcome_of(r) for r in kept],
                           [r.summary.get("diverged_at_step") for r in kept if r.status == "diverged"],
                           stats["left_out"] if stats["n_left_out"] else ""))
    return out


def _counts(words: list[str]) -> str:
    """"2 stuck, 1 collapsed", most frequent first, ties in order of appearance."""
    order = list(dict.fromkeys(words))
    return ", ".join(f"{words.count(w)} {w}" for w in sorted(order, key=lambda w: (-words.count(w), order.index(w))))


def _loss(s: Setting) -> str:
    if not math.isfinite(s.mean):
        return "no loss"
    return f"loss {s.mean:.3f}" + (f", interval {s.low:.3f} … {s.high:.3f}" if s.has_interval else "")


def _entry(s: Setting) -> str:
    """A setting as the verdict names it: label (n, how its replicates ended, its loss)."""
    group = s.group
    if group == DIVERGED_GROUP:
        steps = [str(a) for a in s.diverged_at if a is not None]
        where = f"; at step{'s' * (len(steps) != 1)} {', '.join(steps)}" if steps else ""
        return f"{s.label} (n={s.n}{where})"
    if group == NO_RUN_GROUP:
        return f"{s.label} ({s.left_out or 'no run'})"
    detail = f": {_counts(s.outcomes)}" if group in (STALLED_GROUP, MIXED_GROUP) else ""
    return f"{s.label} (n={s.n}{detail}; {_loss(s)})" if detail else f"{s.label} (n={s.n}, {_loss(s)})"


def _and(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def overlapping(ss: list[Setting]) -> list[list[Setting]]:
    """The settings whose 95 % intervals overlap, as groups of two or more: the connected pieces
    of the union of their intervals (sorted by the low end, a setting joins the group while its
    interval starts at or below the highest end so far); each group by mean, groups by their lowest mean."""
    groups: list[list[Setting]] = []
    top = -math.inf
    for s in sorted((s for s in ss if s.has_interval), key=lambda s: (s.low, s.high)):
        if groups and s.low <= top:
            groups[-1].append(s)
            top = max(top, s.high)
        else:
            groups.append([s])
            top = s.high
    groups = [sorted(g, key=lambda s: s.mean) for g in groups if len(g) > 1]
    return sorted(groups, key=lambda g: g[0].mean)


def _not_separated(ss: list[Setting]) -> str | None:
    """The verdict's last line: where the data do not separate the settings; None when they all do."""
    judged = [s for s in ss if math.isfinite(s.mean)]
    if len(judged) > 1 and all(s.n < 2 for s in judged):
        return ("every setting rests on one seed (n = 1): each outcome is one run's, and no interval says whether "
                "the losses differ beyond chance (more seeds, e.g. seed=0,1,2, would)")
    parts = [f"{_and([s.label for s in g])} (their 95 % intervals overlap)" for g in overlapping(ss)]
    single = [s.label for s in judged if s.n < 2]
    if single:
        one = len(single) == 1
        parts.append(f"{_and(single)} {'rests' if one else 'rest'} on one seed{'' if one else ' each'} (n = 1): "
                     "no interval, so nothing separates "
                     f"{'it' if one else 'them'} from the others by loss")
    return "by final validation loss: " + "; ".join(parts) if parts else None


def verdict_lines(runs: list[Run], keys: list[str]) -> list[tuple[str, str]]:
    """The verdict as (heading, text) pairs: a heading per group of settings that has one, then
    where the data do not separate them (or that they all are apart)."""
    ss = settings(runs, keys)
    lines = []
    margins = {r.summary.get("stall_margin") for r in runs if r.status == "stalled"}
    margin = f" ({100 * margins.pop():g} %)" if len(margins) == 1 and isinstance(next(iter(margins)), (int, float)) else ""
    for group, heading in ((LEARNED_GROUP, "learned"),
                           (STALLED_GROUP, f"stalled, ended less than stall_margin{margin} below the unigram baseline"),
                           (DIVERGED_GROUP, "diverged"),
                           (MIXED_GROUP, "seeds disagree, so the data do not say how the setting ends"),
                           (NO_RUN_GROUP, "no finished run to judge")):
        members = [s for s in ss if s.group == group]
        if group == LEARNED_GROUP:
            members.sort(key=lambda s: s.mean)  # the lowest loss first
        if members or group in (LEARNED_GROUP, STALLED_GROUP, DIVERGED_GROUP):
            text = "; ".join(map(_entry, members)) or "none"
            lines.append((f"{heading} ({len(members)} of {len(ss)})", text))
    apart = _not_separated(ss)
    if apart:
        lines.append(("not separated by the data", apart))
    elif sum(s.has_interval for s in ss) > 1:
        lines.append(("separated", "every setting's 95 % interval is apart from the others'"))
    return lines


def verdict_intro(runs: list[Run], keys: list[str], left_out: int) -> str:
    """The sentence above the verdict: what it counts, and what n and the numbers are."""
    ss = settings(runs, keys)
    ns = sorted({s.n for s in ss if s.outcomes})
    n = "" if not ns else f"n = {ns[0]} seed{'s' * (ns[0] != 1)} each" if len(ns) == 1 else f"n = {ns[0]} to {ns[-1]} seeds"
    interval = ", with its 95 % t-interval over seeds where n ≥ 2" if any(s.has_interval for s in ss) else ""
    skipped = (f"; {left_out} run{'s' * (left_out != 1)} left out of the statistics and not counted (Notes)"
               if left_out else "")
    return (f"{len(ss)} setting{'s' * (len(ss) != 1)} ({n or 'no finished run'}){skipped}. Each setting: n (the "
            f"seeds in its mean), its runs' outcomes where the group's word does not say them (slow, stuck, collapsed), "
            f"and its mean final validation loss{interval} (the settings table below).")


def verdict_markdown(runs: list[Run], keys: list[str], left_out: int) -> list[str]:
    """report.md's verdict section, placed under the title."""
    return ["## Verdict", "", verdict_intro(runs, keys, left_out), "",
            *(f"- **{heading[0].upper() + heading[1:]}**: {text}" for heading, text in verdict_lines(runs, keys)), ""]


def verdict_text(runs: list[Run], keys: list[str]) -> list[str]:
    """The verdict for the terminal: one line a group."""
    return [f"verdict: {heading}: {text}" for heading, text in verdict_lines(runs, keys)]
