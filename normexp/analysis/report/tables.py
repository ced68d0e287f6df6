"""The report's tables: which config keys vary and in what order, how values are written, the
per-run and per-setting rows, and text / markdown / CSV rendering."""

from __future__ import annotations

from collections.abc import Collection

import csv
import math
import re
from pathlib import Path

import pandas as pd

from ...config.compose import config_groups
from ...config.keys import override_key
from ...runs.outcomes import OUTCOMES, classify
from ...runs.reading import Run
from ...runs.schema import CSV_FIELDS, EXECUTION_SETTINGS, FINISHED, HPARAMS, TABLE_FIELDS
from .. import study


# ------------------------------------------------------------------- varied keys

def priority() -> tuple[str, ...]:
    """The tie-break order of varied keys the overrides do not mention (e.g. set by an experiment
    file): runs/schema.py's HPARAMS, the one "most often varied first" order, a config group by
    its name key (placement -> placement.name)."""
    return tuple(f"{k}.name" if k in config_groups() else k for k in HPARAMS)


def display_name(key: str) -> str:
    """placement.name -> placement (a config group is named by its option)."""
    group, _, rest = key.partition(".")
    return group if group in config_groups() and rest == "name" else key


def _override_key(override: str) -> str:
    key = override_key(override)
    return f"{key}.name" if key in config_groups() else key


def varied_keys(runs: list[Run]) -> list[str]:
    """Config keys whose values differ between runs, most important first: in the order the
    sweep's overrides name them, then by `priority()`. A group's sub-keys (norm.eps, ...) are
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

    order = priority()

    def rank(k: str):
        if k in position:
            return (0, position[k], k)
        return (1, order.index(k) if k in order else len(order), k)

    return sorted(varied, key=rank)


# Settings that change what the loss measures: its unit (nats per byte or per token), the
# vocabulary it is spread over, the text it is measured on. Runs that differ in one of them are
# never pooled into one mean, wherever a table or figure pools other keys.
UNIT_GROUPS = ("tokenizer", "data")


def sets_the_unit(key: str) -> bool:
    """tokenizer.name, tokenizer.vocab_size, data.name, data.files, ...: see UNIT_GROUPS."""
    return key.split(".", 1)[0] in UNIT_GROUPS


def kept_apart_note(keys: list[str]) -> list[str]:
    """The one line saying which varied keys set the loss's unit (so nothing pools them)."""
    apart = list(dict.fromkeys(display_name(k) for k in keys if sets_the_unit(k)))
    if not apart:
        return []
    return [f"kept apart: {', '.join(apart)} ({'it sets' if len(apart) == 1 else 'they set'} the loss's unit, e.g. "
            "nats per byte or per token: runs with different values are never pooled into one mean)"]


def sort_key(value):
    """Numbers before strings, numbers by value: 0 < 5 < 50, not '0' < '50' < '5'."""
    if isinstance(value, bool) or value is None:
        return (2, str(value))
    if isinstance(value, (int, float)):
        return (0, float(value))
    return (1, str(value))


# ---------------------------------------------------------------------- the rows

def outcome_of(r: Run) -> str | None:
    """What became of a finished run, in runs.csv's `outcome` words (normexp/runs/outcomes.py:
    learned, slow, stuck, collapsed, diverged; never_learned): the one its summary.json recorded,
    else classified from it (summaries older than the outcome); None for a run that did not finish.
    The report says a run *learned* where the status says *completed*: status is how the run
    ended, outcome what it came to, and the report speaks of the latter."""
    if r.status not in FINISHED:
        return None
    recorded = r.summary.get("outcome")
    return recorded if recorded in OUTCOMES else classify(r.summary)


def ended_as(r: Run) -> str:
    """A run's one word: its outcome once finished, else its status (running, failed, killed, ...)."""
    return outcome_of(r) or str(r.status)


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


def is_missing(value) -> bool:
    """A key this setting does not have: None, or NaN where a table mixes settings."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt_param(value) -> str:
    """A hyperparameter value as the user would type it: 0.01, 3e-05, 200."""
    if is_missing(value):
        return "-"
    return f"{value:g}" if isinstance(value, float) else str(value)


def fmt_rate(value) -> str:
    """Throughput as a whole number with thousands separators."""
    return "-" if value is None else f"{value:,.0f}"


def table_rows(runs: list[Run], keys: list[str], left_out: dict | None = None) -> tuple[list[str], list[list[str]]]:
    """One row per run; the last column says whether it is in the statistics (`left_out`:
    {run index: short reason}, from `left_out_of_statistics`)."""
    fields = list(TABLE_FIELDS)
    at = fields.index("status") + 1  # the outcome beside the status, as runs.csv has them
    head = ["#", *map(display_name, keys), *[TABLE_FIELDS[f] for f in fields[:at]], "outcome",
            *[TABLE_FIELDS[f] for f in fields[at:]], "in stats"]
    rows = []
    for r in runs:
        m = {**r.metrics(), "status": r.status}  # the status as the report sees it ("killed")
        shown = [str(m["status"]) if f == "status" else fmt_rate(m.get(f)) if f == "tokens_per_second"
                 else fmt(m.get(f)) for f in fields]
        why = (left_out or {}).get(r.index)
        rows.append([str(r.index), *(fmt_param(r.config.get(k)) for k in keys), *shown[:at], outcome_of(r) or "-",
                     *shown[at:], "yes" if why is None else f"no: {why}"])
    return head, rows


def left_out_of_statistics(runs: list[Run], keys: list[str]) -> list[tuple[Run, str, str]]:
    """(run, short reason, why) of every run the settings' statistics leave out (study.screen),
    in run order."""
    out = [item for members in study.cells(runs, keys).values() for item in study.screen(members).left_out]
    return sorted(out, key=lambda item: item[0].index)


def cell_rows(runs: list[Run], keys: list[str]) -> tuple[list[str], list[list[str]]]:
    """The settings table: one row per cell (runs that differ only in seed)."""
    table = study.cell_table(runs, keys, sort_key)
    records = table.to_dict("records")
    # the interval column only where some setting has one (n >= 2): with one seed each it would name
    # an interval the report does not have
    interval = any(math.isfinite(r["low"]) for r in records)
    head = [*map(display_name, keys), "n", "mean final val", *["95 % t-interval"] * interval, "below baseline",
            "learned", "stalled", "diverged", "failed", "left out"]
    rows = [[*(fmt_param(r[k]) for k in keys), str(r["n"]), fmt(r["mean"]) if math.isfinite(r["mean"]) else "-",
             *[f"{r['low']:.4f} … {r['high']:.4f}" if math.isfinite(r["low"]) else "-"] * interval,
             f"{100 * r['margin_below_baseline']:.1f} %" if math.isfinite(r["margin_below_baseline"]) else "-",
             str(r["n_learned"]), str(r["n_stalled"]), str(r["n_diverged"]), str(r["n_failed"]), left_out_cell(r)]
            for r in records]
    return head, rows


def left_out_cell(row: dict) -> str:
    """"0", or "2: 1 killed, 1 duplicate seed"."""
    return str(row["n_left_out"]) + (f": {row['left_out']}" if row["n_left_out"] else "")


# ------------------------------------------------------------------- rendering

def text_table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    numeric = [all(_is_number(r[i]) for r in rows) for i in range(len(head))]
    line = lambda cells: "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(cells, widths, numeric))  # noqa: E731
    return "\n".join([line(head), "  ".join("-" * w for w in widths), *map(line, rows)])


def without_empty_columns(head: list[str], rows: list[list[str]]) -> tuple[list[str], list[list[str]]]:
    """The columns that hold some value: a terminal table leaves out those that are "-" in every
    row (no run diverged, no interval for n = 1), which report.md and the CSV keep."""
    keep = [i for i in range(len(head)) if not rows or any(r[i] != "-" for r in rows)]
    return [head[i] for i in keep], [[r[i] for i in keep] for r in rows]


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
            # the status as the report sees it ("killed"); the outcome classified where an old summary lacks it
            m = {**r.metrics(), "status": r.status, "outcome": outcome_of(r)}
            w.writerow([r.index, r.rel, *(r.config.get(k) for k in keys),
                        *("" if m.get(c) is None else m.get(c) for c in CSV_FIELDS), left_out.get(r.index, "")])


NUMBER = re.compile(r"[−-]?\d+(?:\.(\d+))?(?:e([+−-]?\d+))?")


def _close(old: str, new: str) -> bool:
    """Whether two printed cells say the same: the same words, and each number of `new` within one
    unit of the last digit `old` prints (an optimizer's last digits differ between library versions)."""
    a, b = list(NUMBER.finditer(old)), list(NUMBER.finditer(new))
    if NUMBER.sub("#", old) != NUMBER.sub("#", new) or len(a) != len(b):
        return False
    for x, y in zip(a, b):
        unit = 10.0 ** -len(x.group(1) or "") * 10.0 ** int((x.group(2) or "0").replace("−", "-"))
        if abs(float(x.group(0).replace("−", "-")) - float(y.group(0).replace("−", "-"))) > 1.001 * unit:
            return False
    return True


def same_columns(old: Path, new: Path, rewrite: Collection[str] = ()) -> None:
    """ValueError naming the first column of `old` (a committed CSV) whose cells `new` (the same
    table recomputed) does not reproduce (`_close`); nothing when `old` does not exist. Columns
    named in `rewrite` (whose method changed on purpose) are not compared."""
    if not old.is_file():
        return
    a, b = (pd.read_csv(f, dtype=str, keep_default_na=False) for f in (old, new))
    for c in a.columns:
        if c in rewrite:
            continue
        if c not in b.columns or len(a) != len(b) or not all(map(_close, a[c], b[c])):
            raise ValueError(f"{old}: column {c!r} does not come out as committed; nothing written")
