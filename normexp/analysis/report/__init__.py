"""`normexp report PATH`: compare the runs under a folder — a table, runs.csv, report.md, figures.

Everything is read back through the run-folder contract (normexp/runs/); nothing is
re-computed by training:

    summary.json            status and final numbers (written at start and at the end)
    .hydra/config.yaml      the hyperparameters; the ones that differ between runs are
    .hydra/overrides.yaml   the "varied keys", ordered as the user typed them in the sweep
    events.out.tfevents.*   val/loss curves and the per-layer instruments

A run still going has "running" in summary.json and no final numbers yet (a run that says
"running" but whose process is gone from this host is shown as "killed"): its values come
from its event file, as far as TensorBoard has flushed it (every 30 s). A run that failed
before training has summary.json but no events; it is listed with its error.

    tables.py     which keys vary and their order, the rows, text / markdown / CSV rendering
    figures.py    the figures, each with its data beside it
    sections.py   the overview, the notes and a study's sections (sensitivity, depth, boundary, depth law)
    transfer_sections.py   an lr grid crossed with depth or width: does the lr transfer?
    registry.py   the analysis sections, each registered beside its function, asked in order
    build.py      report_into: read the runs, write everything, print the tables
    this file     make_report: the folders checked first, before the statistics and figures
                  (scipy, pandas, matplotlib: seconds to import) are loaded
"""

from __future__ import annotations

from pathlib import Path

from .registry import ReportError

__all__ = ["SECTIONS", "ReportError", "make_report"]


def _check_paths(root: Path, out: Path | None) -> Path:
    """The output folder, after checking the input folder exists and the output is writable."""
    if not root.exists():
        raise ReportError(f"{root}: no such folder; give a sweep folder, e.g. runs/multirun/<date>/<time>")
    if not root.is_dir():
        raise ReportError(f"{root} is a file; give the folder that holds the run folders")
    out_dir = Path(out) if out is not None else root
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_check = out_dir / ".normexp-report-write-test"
        write_check.write_text("")
        write_check.unlink()
    except OSError as e:
        raise ReportError(f"cannot write to {out_dir} ({e.strerror}); choose another folder with --out") from None
    return out_dir


def make_report(path: Path, out: Path | None = None, echo=print) -> dict:
    """Build the tables (one row per run; one per setting, seeds pooled), runs.csv,
    settings.csv, report.md and the figures, each figure with a .csv of the data it draws;
    with lr swept, sensitivity.csv and lr_sensitivity.png; with layers swept, depth.csv and
    depth_sweep.png; with an lr grid crossed with layers or d_model, the transfer sections
    (transfer_sections.py). The files name the reported folder by its name and each run relative to it
    (they are committed and shared); only the terminal shows absolute paths. Returns what was
    written.

    All or nothing: the files are written into a temporary folder inside the output folder and
    moved into place (report.md last) only once every one was written, so a failure leaves the
    output folder as it was, never a report half of whose files are from this run."""
    root = Path(path)
    out_dir = _check_paths(root, out)  # a typo is refused before the statistics' libraries load
    from .build import report_into

    return report_into(root, out_dir, echo)


def __getattr__(name: str):
    """The rest of the package's names (SECTIONS, transfer_skipped, ...) from build.py, imported
    on first use: importing build registers every analysis section."""
    import importlib

    if name.startswith("__"):  # the import system's own questions (__path__ is set; __wrapped__, ...)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    build = importlib.import_module(f"{__name__}.build")  # not `from . import build`: that asks this hook first
    try:
        return getattr(build, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
