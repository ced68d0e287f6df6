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


def lr_grid_beside_one_point(root: Path) -> Path:
    """Pre-LN at three lrs, Post-LN at one (the README's first sweep beside an lr sweep), one depth, two seeds."""
    for placement, lrs in (("pre", (1e-3, 3e-3, 1e-2)), ("post", (1e-2,))):
        for lr in lrs:
            for seed in (0, 1):
                write_run(root, {"placement": {"name": placement}, "lr": lr, "layers": 6, "seed": seed},
                          [f"placement={placement}", f"lr={lr}", f"seed={seed}"],
                          {"status": "completed", "final_val_loss": 2.0 + lr * 10 + seed / 100})
    return root


def test_a_setting_tried_at_one_lr_is_left_out_of_the_sensitivity_by_name(tmp_path):
    said = []
    report.make_report(lr_grid_beside_one_point(tmp_path / "sweep"), echo=said.append)
    md = (tmp_path / "sweep" / "report.md").read_text()
    section = md[md.index("## Learning-rate sensitivity"):md.index("## Runs")]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "LR sensitivity" not in line]
    # only Pre-LN's row: Post-LN at one lr would read "0.0000" and a max stable lr from one run
    assert [row.split("|")[1].strip() for row in rows] == ["pre"]
    assert ("Left out of this section (an lr sensitivity needs 3 lr values or more per setting): "
            "placement=post (1 lr value).") in section
    sensitivity = (tmp_path / "sweep" / "sensitivity.csv").read_text().splitlines()
    assert len(sensitivity) == 2 and sensitivity[1].startswith("pre,")
    # one depth: no critical depth section; the one note names it, and the transfer sections, and why
    assert "## Critical depth" not in md
    note = next(line for line in said if line.startswith("note: sections left out: "))
    assert note == ("note: sections left out: critical depth (layers takes 1 value; it needs 3 or more); "
                    "lr transfer across depth (it needs 3 lrs or more crossed with 2 layers values or more; the runs "
                    "hold 3 lrs and 1 layers value); lr transfer across width (it needs 3 lrs or more crossed with 2 "
                    "d_model values or more; the runs hold 3 lrs and 0 d_model values)")
    assert f"- {note[len('note: '):]}" in md


def test_runs_at_a_single_lr_and_depth_draw_no_sensitivity_or_depth_section_and_say_so(tmp_path):
    for placement in ("pre", "post"):
        write_run(tmp_path / "sweep", {"placement": {"name": placement}, "lr": 1e-2, "layers": 6, "seed": 0},
                  [f"placement={placement}"], {"status": "completed", "final_val_loss": 2.0})
    said = []
    report.make_report(tmp_path / "sweep", echo=said.append)
    md = (tmp_path / "sweep" / "report.md").read_text()
    assert "## Learning-rate sensitivity" not in md and "## Critical depth" not in md
    assert not (tmp_path / "sweep" / "sensitivity.csv").exists()
    note = next(line for line in said if line.startswith("note: sections left out: "))
    assert note.startswith("note: sections left out: lr sensitivity and max stable lr (lr takes 1 value; it needs 3 or "
                           "more); critical depth (layers takes 1 value; it needs 3 or more); ")
