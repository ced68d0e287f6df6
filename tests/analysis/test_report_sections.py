"""The report asks every registered analysis section (normexp/analysis/report/registry.py): a
section registered from outside the package's own modules is written when it applies, in its
order, with the files it wrote listed; one that does not apply leaves no trace."""

from pathlib import Path

from test_left_out_runs import write_run

import normexp.analysis.report as report
from normexp.analysis.report.registry import Folder


def warmup_grid(root: Path) -> Path:
    for warmup in (0, 10, 20):
        write_run(root, {"warmup": warmup, "seed": 0}, [f"warmup={warmup}", "seed=0"],
                  {"status": "completed", "final_val_loss": 2.0 + warmup / 100})
    return root


def warmup_section(folder: Folder, out_dir: Path, echo) -> list[str]:
    values = sorted(r.config["warmup"] for r in folder.runs)
    (out_dir / "warmups.txt").write_text(" ".join(map(str, values)))
    return ["## Warmups", "", f"tried: {values}", ""]


def test_a_registered_section_that_applies_is_written_in_its_order(tmp_path, monkeypatch):
    monkeypatch.setitem(report.SECTIONS, "warmups", report.registry.Section(
        "warmups", 5, lambda f: "warmup" in f.keys, warmup_section, ("warmups.txt", "never_written.csv")))
    monkeypatch.setitem(report.SECTIONS, "unused", report.registry.Section(
        "unused", 1, lambda f: "layers" in f.keys, lambda *_: ["## Never"], ("unused.csv",)))
    said = []
    report.make_report(warmup_grid(tmp_path / "sweep"), echo=said.append)
    md = (tmp_path / "sweep" / "report.md").read_text()
    assert "## Warmups\n\ntried: [0, 10, 20]" in md and "## Never" not in md
    assert md.index("## Warmups") < md.index("## Runs")  # after the settings table, before the runs
    assert (tmp_path / "sweep" / "warmups.txt").read_text() == "0 10 20"
    wrote = next(line for line in said if line.startswith("wrote "))
    assert "warmups.txt" in wrote and "never_written.csv" not in wrote and "unused.csv" not in wrote


def test_the_shipped_sections_are_registered_in_the_report_order():
    """The order report.md had before the registry (a new section may come anywhere among them)."""
    shipped = ["boundary", "depth_law", "sensitivity", "depth", "depth_transfer", "width"]
    order = [s.name for s in sorted(report.SECTIONS.values(), key=lambda s: (s.order, s.name))]
    assert [name for name in order if name in shipped] == shipped
