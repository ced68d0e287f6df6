"""The body of `normexp report` (the package's make_report checks the folders first, then
calls report_into): everything that needs the statistics and figures (scipy, pandas, matplotlib)."""

from __future__ import annotations

import importlib
import os
import pkgutil
import shutil
import tempfile
from pathlib import Path

from ...runs.reading import find_files, read_runs, relative_name
from ...runs.schema import Status
from ..boundary import PROGRESS_TABLE, TABLE, sweep_tables
from .. import study, transfer
from .figures import draw_figures
from .registry import SECTIONS, Folder, ReportError, left_out_line, write_sections
from .sections import overview_line, run_notes, screening_notes
from .verdict import verdict_markdown, verdict_text
from .tables import (cell_rows, display_name, kept_apart_note, left_out_of_statistics, markdown_table, sets_the_unit,
                     sort_key, table_rows, text_table, varied_keys, without_empty_columns, write_csv)

# every module here, so that each analysis section registers itself (registry.py)
_PACKAGE = __name__.rpartition(".")[0]
for _module in sorted(m.name for m in pkgutil.iter_modules(importlib.import_module(_PACKAGE).__path__)):
    importlib.import_module(f"{_PACKAGE}.{_module}")


def _analysis_sections(runs, keys, root: Path, out_dir: Path, echo) -> tuple[list[str], list[str], list[str]]:
    """The report's sections after the settings table, each registered section that applies to
    what the folder holds (registry.py): (markdown lines, files written, notes)."""
    notes = []
    searched, in_progress = sweep_tables(find_files(root, TABLE), find_files(root, PROGRESS_TABLE))
    if in_progress:  # a search still running, or stopped before it finished: read what it had written so far
        notes.append("boundary search not finished (still running, or stopped: resume it with resume=true) in "
                     + ", ".join(relative_name(t.parent, root) for t in in_progress) + f": its {PROGRESS_TABLE} is read")
    notes += [] if searched else transfer_skipped(runs, keys)  # a grid cut short: its own note, with the counts
    sections, extra, left_out = write_sections(Folder(runs, keys, root, searched), out_dir, echo)
    notes += left_out_line(left_out)
    return sections, extra, notes


def transfer_skipped(runs, keys: list[str]) -> list[str]:
    """One note per transfer section the folder almost holds: lr and depth (or width) both vary,
    but with fewer lrs or sizes than transfer.is_grid needs (the presets' sweeps cut short)."""
    notes = []
    for size_key, what, preset in (("layers", "depth", "depth_transfer"), ("d_model", "width", "width_proxies")):
        if "lr" not in keys or size_key not in keys or transfer.is_grid(runs, keys, size_key):
            continue
        lrs = len({r.config.get("lr") for r in runs if r.config.get("lr") is not None})
        sizes = len({r.config.get(size_key) for r in runs if r.config.get(size_key) is not None})
        notes.append(f"the lr transfer across {what} ({preset}'s section: transfer tables and figures) is skipped: "
                     f"it needs {transfer.MIN_LRS} lrs or more crossed with {transfer.MIN_SIZES} {size_key} values "
                     f"or more, and the runs hold {lrs} lr{'s' * (lrs != 1)} and {sizes} {size_key} "
                     f"value{'s' * (sizes != 1)}")
    return notes


def _nothing_usable(runs, root: Path) -> str | None:
    """Why no run can be reported, in one line, when every run's summary.json or config is malformed
    (truncated, not JSON, not a summary) or says it finished beside a final loss that is no
    finite number (study.untrusted_reason); None when some run can be used. A run still going,
    failed or interrupted is usable: the report shows its curve or its error."""
    malformed = [r for r in runs if r.status == Status.MALFORMED]
    untrusted = [r for r in runs if study.untrusted_reason(r)]
    if len(malformed) + len(untrusted) < len(runs):
        return None
    parts = [f"{len(malformed)} have a summary.json or config that does not read ({malformed[0].problem})"] \
        if malformed else []
    parts += [f"{len(untrusted)} say {untrusted[0].status} beside a final_val_loss that is not a finite number "
              f"({untrusted[0].metrics().get('final_val_loss')} in {untrusted[0].rel}/summary.json)"] if untrusted else []
    return (f"{root}: no run could be used, so no report was written: {len(runs)} run{'s' * (len(runs) != 1)}, "
            f"{'; '.join(parts)}; fix or remove those files (the runs' events and checkpoints are "
            "untouched), or report another folder")


def report_into(root: Path, out_dir: Path, echo=print) -> dict:
    """make_report's work once its folders are checked (the package's make_report says what it writes)."""
    runs = read_runs(root)
    if not runs:
        raise ReportError(f"{root}: no run folders found (a run folder holds .hydra/config.yaml); "
                          "give a folder written by `normexp train`")
    problem = _nothing_usable(runs, root)
    if problem:
        raise ReportError(problem)
    staging = Path(tempfile.mkdtemp(prefix=".normexp-report-", dir=out_dir))
    try:
        result = _write_report(root, runs, staging, echo)
        names = sorted(os.listdir(staging), key=lambda n: (n == "report.md", n))
        for name in names:
            os.replace(staging / name, out_dir / name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    final = lambda p: out_dir / Path(p).name  # noqa: E731 - where a staged file now lies
    written = [final(p) for p in result.pop("written")]
    echo("wrote " + ", ".join(str(p) for p in written))
    return {**result, "figures": [final(p) for p in result["figures"]], "csv": final(result["csv"]),
            "markdown": final(result["markdown"])}


def _settings_caption(cell_head: list[str]) -> str:
    """The settings table's caption; it names the interval only where the table has one (n >= 2)."""
    interval = ("95 % t-interval over seeds (none for n = 1); " if "95 % t-interval" in cell_head
                else "no interval: every setting has one seed (n = 1); ")
    return ("Mean final validation loss over seeds, a diverged run counted as its initial loss; " + interval +
            "below baseline: how far the mean sits below the unigram baseline; learned, stalled, diverged: how many "
            "of the setting's replicates had each outcome (stalled: slow, stuck or collapsed), failed: how many "
            "runs failed. n: the runs in the mean, finished ones only and one per seed; left out: the others and "
            "why (Notes).")


def _runs_caption() -> str:
    """The per-run table's one sentence on its two columns (runs.csv has the same two)."""
    return ("status: how the run ended (completed: ran its steps and ended at least stall_margin below the unigram "
            "baseline; stalled: ran its steps but did not; diverged; failed, running, killed, ...); outcome: what it "
            "came to, for a finished run (learned = completed; a stalled run is slow, stuck or collapsed; "
            "diverged), the word the verdict and the figures use.")


def _write_report(root: Path, runs, out_dir: Path, echo) -> dict:
    """make_report's work, every file written into `out_dir` (the staging folder)."""
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
    # report.md is committed and shared: it names the folder by its name and each run relative
    # to it, never by this machine's absolute path; the terminal shows the path as typed
    folder_name = root.resolve().name
    overview = overview_line(runs, keys, root)
    figures, notes = draw_figures(runs, keys, out_dir)
    notes += kept_apart_note(keys) + screening_notes(left_out)
    pooled = [k for k in keys[2:] if not sets_the_unit(k)]  # the grid splits its rows by the others
    pools = [f"the final-loss grid shows {display_name(keys[0])} × {display_name(keys[1])} and "
             f"pools {', '.join(map(display_name, pooled))}"] if pooled else []
    md_notes = notes + run_notes(runs, folder=folder_name) + pools
    notes = notes + run_notes(runs) + pools
    sections, extra, search_notes = _analysis_sections(runs, keys, root, out_dir, echo)
    notes, md_notes = notes + search_notes, md_notes + search_notes
    csv_path, md_path = out_dir / "runs.csv", out_dir / "report.md"
    write_csv(csv_path, runs, run_keys, left_out_short)
    # the verdict opens the report, read from the settings table's statistics (never a left-out run)
    md = [f"# normexp report: `{folder_name}`", "", *verdict_markdown(runs, keys, len(left_out)),
          overview_line(runs, keys, folder_name), "", "## Settings (seeds pooled)", "", _settings_caption(cell_head), "",
          markdown_table(cell_head, cell_body), "", *sections, "## Runs", "", _runs_caption(), "",
          markdown_table(head, rows), ""]
    if md_notes:
        md += ["## Notes", "", *(f"- {n}" for n in md_notes), ""]
    md += ["## Figures", ""]
    for title, name in figures:
        md += [f"### {title}", "", f"![{title}]({name})", ""]
    md_path.write_text("\n".join(md))
    echo(overview)
    echo(text_table(*without_empty_columns(head, rows)))
    echo("\nper setting (seeds pooled):\n" + text_table(*without_empty_columns(cell_head, cell_body)))
    for n in notes:
        echo(f"note: {n}")
    for line in verdict_text(runs, keys):
        echo(line)
    written = [csv_path, md_path, *(out_dir / name for _, name in figures), *(out_dir / n for n in extra)]
    return {"runs": runs, "keys": keys, "figures": [out_dir / n for _, n in figures], "notes": notes,
            "csv": csv_path, "markdown": md_path, "left_out": left_out, "written": written}
