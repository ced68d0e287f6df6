"""Which runs are replicates: `normexp report` and `runs.load` on hand-written run folders
with a killed run, same-seed duplicates, a failed run, a run that diverged before it had a
loss, an interrupted run and malformed summary.json files. Every expected number is computed
here from the summaries the test writes."""

import json
import math
import os
import socket
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SAFETY_NET_S, read_csv, run_cli

T975_DF1 = 12.706205
BASELINE = 3.3


def dead_pid() -> int:
    """The pid of a process that has exited (and been reaped): a killed run's."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def write_run(root: Path, name: str, lr: float, seed: int, summary, age: int = 0) -> Path:
    """A run folder as `normexp train` leaves it (config and summary.json, no events);
    `summary` a dict (completed fields filled in) or raw text; `age` seconds into the past."""
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(
        f"placement:\n  name: pre\nnorm:\n  name: layer\nlayers: 2\nlr: {lr}\nseed: {seed}\nthreads: 1\n")
    (run / ".hydra" / "overrides.yaml").write_text(f"- lr={lr}\n- seed={seed}\n")
    if isinstance(summary, dict):
        summary = {"steps_completed": 300, "initial_loss": 5.5, "baseline_loss": BASELINE, "stall_margin": 0.02,
                   "diverged_at_step": None, "tokens_per_second": 1000.0, **summary}
        summary = json.dumps(summary)
    (run / "summary.json").write_text(summary)
    t = 1_700_000_000 - age
    os.utime(run / "summary.json", (t, t))
    return run


def killed(steps: int) -> dict:
    return {"status": "running", "steps_completed": steps, "final_val_loss": None, "pid": dead_pid(),
            "host": socket.gethostname()}


def build(root: Path) -> Path:
    """lr 1e-3: seeds 0, 1 completed; an older finished copy of seed 1 (duplicate); seed 1
    killed half-way (its last eval is low: it must not pull the mean); a failed run; a
    summary with a string loss. lr 1e-2: seed 0 completed, seed 1 diverged at step 0 with no
    finite loss (no ℓ₀), seed 2 diverged with ℓ₀. lr 1e-1: a summary that is a JSON list,
    seed 1 stalled, seed 2 interrupted."""
    w = lambda *a, **k: write_run(root, *a, **k)  # noqa: E731
    w("lr=0.001,seed=0", 1e-3, 0, {"status": "completed", "final_val_loss": 2.0})
    w("lr=0.001,seed=1", 1e-3, 1, {"status": "completed", "final_val_loss": 2.2}, age=10)
    w("lr=0.001,seed=1,old", 1e-3, 1, {"status": "completed", "final_val_loss": 2.6}, age=1000)
    w("lr=0.001,seed=1,killed", 1e-3, 1, killed(161))
    w("lr=0.001,seed=2", 1e-3, 2, {"status": "failed", "final_val_loss": None, "error": "boom"})
    w("lr=0.001,seed=3", 1e-3, 3, {"status": "completed", "final_val_loss": "2.1"})
    w("lr=0.01,seed=0", 1e-2, 0, {"status": "completed", "final_val_loss": 2.5})
    w("lr=0.01,seed=1", 1e-2, 1, {"status": "diverged", "initial_loss": None, "final_val_loss": None,
                                  "diverged_at_step": 0})
    w("lr=0.01,seed=2", 1e-2, 2, {"status": "diverged", "final_val_loss": None, "diverged_at_step": 40})
    w("lr=0.1,seed=0", 1e-1, 0, "[1, 2, 3]")
    w("lr=0.1,seed=1", 1e-1, 1, {"status": "stalled", "final_val_loss": 3.1})
    w("lr=0.1,seed=2", 1e-1, 2, {"status": "interrupted", "final_val_loss": 2.9})
    return root


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    from normexp.analysis.report import make_report

    root = build(tmp_path_factory.mktemp("screening") / "sweep")
    lines: list[str] = []
    result = make_report(root, echo=lines.append)
    return root, result, "\n".join(lines)


def test_settings_pool_only_finished_runs_one_per_seed(reported):
    root, _, _ = reported
    rows = {float(r["lr"]): r for r in read_csv(root / "settings.csv")}
    # by hand: the losses that are replicates, cell by cell (diverged with ℓ₀ = 5.5 counts as 5.5)
    want = {1e-3: ([2.0, 2.2], 4, 0), 1e-2: ([2.5, 5.5], 1, 2), 1e-1: ([3.1], 2, 0)}
    for lr, (losses, n_out, n_div) in want.items():
        row = rows[lr]
        assert int(row["n"]) == len(losses) and int(row["n_left_out"]) == n_out, row
        assert float(row["mean"]) == pytest.approx(statistics.mean(losses))
        assert int(row["n_diverged"]) == n_div
        if len(losses) > 1:
            half = T975_DF1 * statistics.stdev(losses) / math.sqrt(2)
            assert float(row["low"]) == pytest.approx(statistics.mean(losses) - half)
        else:
            assert row["low"] == "" or math.isnan(float(row["low"]))
    assert sorted(rows[1e-3]["left_out"].split(", ")) == ["1 duplicate seed", "1 failed", "1 killed", "1 malformed"]
    assert int(rows[1e-3]["n_failed"]) == 1
    assert rows[1e-2]["left_out"] == "1 no initial loss"
    assert sorted(rows[1e-1]["left_out"].split(", ")) == ["1 interrupted", "1 malformed"]


def test_sensitivity_and_max_stable_lr_ignore_the_killed_and_duplicate_runs(reported):
    root, _, _ = reported
    (row,) = read_csv(root / "sensitivity.csv")
    means = [statistics.mean([2.0, 2.2]), statistics.mean([2.5, 5.5]), 3.1]  # min(ℓ, ℓ₀ = 5.5) changes nothing
    assert float(row["lr_sensitivity"]) == pytest.approx(statistics.mean(m - min(means) for m in means))
    # every kept seed at 1e-3 completed; the killed seed-1 run and the failed run would spoil it
    assert float(row["max_stable_lr"]) == 1e-3
    assert int(row["n_seeds"]) == 1 and int(row["n_left_out"]) == 4 + 1 + 2


def test_every_run_is_listed_with_why_it_is_left_out(reported):
    root, result, printed = reported
    runs = read_csv(root / "runs.csv")
    assert len(runs) == 12
    why = {r["path"]: r["left_out"] for r in runs}
    assert why["lr=0.001,seed=1,old"] == "duplicate seed" and why["lr=0.001,seed=1,killed"] == "killed"
    assert why["lr=0.001,seed=1"] == "" and why["lr=0.01,seed=1"] == "no initial loss"
    status = {r["path"]: r["status"] for r in runs}
    assert status["lr=0.1,seed=0"] == status["lr=0.001,seed=3"] == "malformed"
    assert status["lr=0.001,seed=1,killed"] == "killed"
    notes = "\n".join(result["notes"])
    assert "7 runs left out of the loss statistics" in notes and "the newest is kept" in notes
    assert "same setting and seed 1 as lr=0.001,seed=1" in notes
    assert f"{root / 'lr=0.1,seed=0' / 'summary.json'}: holds a JSON list, not an object" in notes
    assert 'final_val_loss is "2.1", not a number' in notes
    assert "it saved no checkpoint" in notes  # the killed run has none: no promise of one
    assert notes.count("holds a JSON list") == 1  # said once, with the fix
    assert "fix or remove that file" in notes
    assert "no: duplicate seed" in printed and "note: run #" in printed
    md = (root / "report.md").read_text()
    assert "| left out |" in md and "7 runs left out" in md


def test_runs_load_names_the_malformed_file(reported):
    from normexp.runs import reading as runs

    root, _, _ = reported
    df = runs.load(root).set_index("run")
    assert len(df) == 12
    assert df.loc["lr=0.1,seed=0", "status"] == "malformed"
    assert df.loc["lr=0.1,seed=0", "error"] == f"{root / 'lr=0.1,seed=0' / 'summary.json'}: holds a JSON list, not an object"
    assert "final_val_loss" in df.loc["lr=0.001,seed=3", "error"]
    assert df.loc["lr=0.001,seed=0", "final_val_loss"] == 2.0  # the others read as usual


@pytest.mark.parametrize("text, problem", [
    ("{not json", "not valid JSON"),
    ('{"status": "completed", "final_val_loss": [2.0]}', "final_val_loss is [2.0], not a number"),
    ('{"status": "done"}', "status 'done' is not one of"),
    ('"completed"', "holds a JSON str, not an object"),
])
def test_a_folder_of_only_malformed_runs_still_reports(tmp_path, cli_env, text, problem):
    root = tmp_path / "sweep"
    write_run(root, "a", 1e-3, 0, text)
    write_run(root, "b", 1e-2, 0, {"status": "completed", "final_val_loss": 2.0})
    proc = run_cli(["report", str(root)], cli_env, check=False, timeout=SAFETY_NET_S)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert problem in proc.stdout and str(root / "a" / "summary.json") in proc.stdout


def test_two_finished_duplicates_keep_the_newest_whatever_the_order(tmp_path):
    from normexp.analysis import study
    from normexp.runs.reading import read_runs

    root = tmp_path / "sweep"
    write_run(root, "z_old", 1e-3, 0, {"status": "completed", "final_val_loss": 2.0}, age=500)
    write_run(root, "a_new", 1e-3, 0, {"status": "stalled", "final_val_loss": 3.2}, age=5)
    sc = study.screen(read_runs(root))
    assert [r.rel for r in sc.kept] == ["a_new"] and sc.losses == [3.2]
    assert [(r.rel, short) for r, short, _ in sc.left_out] == [("z_old", "duplicate seed")]
    assert study.largest_learning({1e-3: read_runs(root)}) is None  # the kept replicate stalled


def test_the_val_curve_of_a_cell_averages_its_replicates_only(tmp_path):
    """A finished seed 0 (val 3.0 then 2.0) and seed 1 (3.2, 2.4), and a killed seed-0 run
    (3.0, 1.0 at its last eval): once runs have finished, the curve is their mean alone."""
    from normexp.analysis.report.figures import plot_val_curves
    from normexp.runs.reading import Run

    def run(name, seed, summary, curve):
        r = Run(tmp_path / name, name, {"lr": 1e-3, "seed": seed}, [], summary)
        r.scalars["val/loss"] = curve
        return r

    runs = [run("a", 0, {"status": "completed", "final_val_loss": 2.0}, [(0, 3.0), (10, 2.0)]),
            run("b", 1, {"status": "completed", "final_val_loss": 2.4}, [(0, 3.2), (10, 2.4)]),
            run("c", 0, killed(5), [(0, 3.0), (10, 1.0)])]
    for i, r in enumerate(sorted(runs, key=lambda r: r.rel != "c"), 1):  # the killed run first, as a report may sort it
        r.index = i
    plot_val_curves(runs, ["lr"], tmp_path / "val_loss.png")
    drawn = {int(r["step"]): r for r in read_csv(tmp_path / "val_loss.csv")}
    assert float(drawn[10]["mean"]) == pytest.approx((2.0 + 2.4) / 2) and drawn[10]["n"] == "2"
    assert float(drawn[0]["mean"]) == pytest.approx((3.0 + 3.2) / 2)


def test_one_value_in_two_spellings_is_one_setting(tmp_path):
    """grad_clip=1 and grad_clip=1.0 (and lr 1e-3 against 0.001) with one seed are one
    replicate, not two; another value is a setting of its own."""
    from normexp.analysis import study
    from normexp.runs.reading import read_runs

    root = tmp_path / "sweep"
    for name, clip, lr, age in (("clip_1", "1", "1e-3", 50), ("clip_1.0", "1.0", "0.001", 5), ("clip_2", "2", "1e-3", 5)):
        run = write_run(root, name, 1e-3, 0, {"status": "completed", "final_val_loss": 2.0 + len(name) / 100}, age=age)
        config = (run / ".hydra" / "config.yaml").read_text().replace("lr: 0.001", f"lr: {lr}")
        (run / ".hydra" / "config.yaml").write_text(config + f"grad_clip: {clip}\n")
    runs = read_runs(root)
    cells = study.cells(runs, ["grad_clip"])
    assert sorted(cells) == [(1,), (2,)] and len(cells[(1,)]) == 2
    sc = study.screen(cells[(1,)])
    assert [r.rel for r in sc.kept] == ["clip_1.0"] and sc.losses == [2.0 + 8 / 100]
    assert [(r.rel, short) for r, short, _ in sc.left_out] == [("clip_1", "duplicate seed")]
    assert [r.rel for r in study.screen(cells[(2,)]).kept] == ["clip_2"]
