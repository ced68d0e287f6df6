"""A shared run folder can only be read (issue 59, items 1, 2 and 8): normexp reads a folder's
records without resolving `${...}`, without following a symbolic link, from regular files of
bounded size, and YAML without aliases; it refuses to write into a folder holding a link."""

import json
import os
from pathlib import Path

import pytest
import yaml

from normexp.runs import safe_files
from normexp.runs.reading import read_runs

SECRET = "0.0031337"  # what the planted interpolation would resolve to


def write_run(root: Path, name: str, lr, loss: float) -> Path:
    """A finished run folder as `normexp train -m lr=...` leaves it (config, overrides, summary)."""
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump({
        "placement": {"name": "pre"}, "lr": lr, "seed": 0, "layers": 2,
        "tokenizer": {"name": "byte", "vocab_size": 256}, "data": {"name": "text", "files": ["c.txt"]}}))
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"lr={lr}"]))
    (run / "summary.json").write_text(json.dumps({
        "status": "completed", "final_val_loss": loss, "best_val_loss": loss, "initial_loss": 6.0,
        "baseline_loss": 7.0, "stall_margin": 0.02, "steps_completed": 10, "diverged_at_step": None}))
    return run


# ------------------------------------------------ item 2: no interpolation resolved


def test_a_planted_interpolation_never_puts_the_environment_into_the_report(tmp_path, monkeypatch):
    """`lr: ${oc.env:NX_SECRET}` in one run's config: no file the report writes (report.md, runs.csv,
    settings.csv, the figure CSVs) holds the variable's value; the run is left out of the statistics
    with its reason, which shows the `${...}` as written. (Breaks caught: load_config resolving with
    OmegaConf as before puts SECRET into runs.csv, settings.csv, final_val_loss.csv and report.md.)"""
    from normexp.analysis.report import make_report

    monkeypatch.setenv("NX_SECRET", SECRET)
    sweep = tmp_path / "sweep"
    for i, lr in enumerate((0.001, 0.003, 0.01)):
        write_run(sweep, f"run{i}", lr, 2.0 + i / 10)
    planted = write_run(sweep, "planted", "${oc.env:NX_SECRET}", 1.5)
    out = tmp_path / "report"
    printed = []
    result = make_report(sweep, out, echo=printed.append)

    written = [p for p in out.rglob("*") if p.is_file()]
    assert {"report.md", "runs.csv", "settings.csv", "final_val_loss.csv"} <= {p.name for p in written}
    for p in written:
        assert SECRET.encode() not in p.read_bytes(), p.name
    assert not any(SECRET in str(line) for line in printed)
    left_out = {r.path: why for r, _, why in result["left_out"]}
    assert "lr holds an interpolation (${oc.env:NX_SECRET})" in left_out[planted], left_out
    assert "${oc.env:NX_SECRET}" in (out / "runs.csv").read_text()


def test_runs_read_as_data_hold_no_resolved_value(tmp_path, monkeypatch):
    """normexp.runs.load (the frame users read) keeps the value out too, and names the problem.
    (Break caught: OmegaConf.load + resolve=True in read_config gives lr == SECRET.)"""
    monkeypatch.setenv("NX_SECRET", SECRET)
    write_run(tmp_path, "planted", "${oc.env:NX_SECRET}", 1.5)
    [run] = read_runs(tmp_path)
    assert run.config["lr"] is None and run.status == "malformed"
    assert "${oc.env:NX_SECRET}" in run.problem and SECRET not in run.problem
