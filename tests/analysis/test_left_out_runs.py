"""Issue 50 items 3, 5, 6: a run left out of the statistics never reaches a table, and a folder
no run of which can be used is one line, exit 2, with nothing written.

The run folders are written by hand (config and summary.json, as tests/analysis/test_screening.py
does): every expected number is computed here from the losses the test writes for the kept runs.
The poisoned runs say "completed" beside a final loss of NaN or Infinity, or hold a truncated
summary.json: before the fix the first two counted as learned (max stable lr, critical depth,
the transfer edges), with no loss in any mean."""

import dataclasses
import json
import math
import statistics
from pathlib import Path

import pandas as pd
import pytest

from conftest import SAFETY_NET_S, run_cli

BASELINE = 3.3
LRS = (1e-3, 2e-3, 4e-3)      # the kept grid
POISONED_LR = 8e-3            # every run at this lr holds a summary the statistics must refuse
DEPTHS = (2, 4, 8)
SEEDS = (0, 1)
POISON = {"nan": float("nan"), "inf": float("inf"), "truncated": None}


def loss(lr: float, size: int, seed: int) -> float:
    """The kept runs' final losses: a parabola in log2 lr around 2e-3, a little worse with size and seed."""
    return 2.0 + 0.1 * math.log2(lr / 2e-3) ** 2 + 0.01 * size + 0.02 * seed


def write_run(root: Path, config: dict, overrides: list[str], summary) -> Path:
    """A run folder as `normexp train -m` leaves it, without events: `summary` a dict, or raw text."""
    run = root / ",".join(overrides)
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(json.dumps({"placement": {"name": "pre"}, "threads": 1, **config}))
    (run / ".hydra" / "overrides.yaml").write_text(json.dumps(overrides))
    if isinstance(summary, dict):
        summary = json.dumps({"steps_completed": 400, "initial_loss": 5.5, "baseline_loss": BASELINE,
                              "stall_margin": 0.02, "diverged_at_step": None, **summary})
    (run / "summary.json").write_text(summary)
    return run


def poisoned_summary(kind: str):
    if kind == "truncated":
        return '{"status": "completed", "final_val_loss": 2.'
    return {"status": "completed", "final_val_loss": POISON[kind]}


def depth_grid(root: Path, kind: str) -> Path:
    """lr (4) × layers (3) × seed (2): every lr but POISONED_LR learned; POISONED_LR poisoned."""
    for lr in (*LRS, POISONED_LR):
        for layers in DEPTHS:
            for seed in SEEDS:
                summary = (poisoned_summary(kind) if lr == POISONED_LR
                           else {"status": "completed", "final_val_loss": loss(lr, layers, seed)})
                write_run(root, {"lr": lr, "layers": layers, "seed": seed},
                          [f"lr={lr}", f"layers={layers}", f"seed={seed}"], summary)
    return root


def by_hand_sensitivity(size: int) -> float:
    """E_η[m(η) − min m] over the kept lrs, m(η) the mean over seeds (no run diverged: no clipping)."""
    means = [statistics.mean(loss(lr, size, s) for s in SEEDS) for lr in LRS]
    return statistics.mean(m - min(means) for m in means)


@pytest.fixture(scope="module", params=sorted(POISON))
def depth_report(request, tmp_path_factory):
    from normexp.analysis.report import make_report

    root = depth_grid(tmp_path_factory.mktemp(f"grid_{request.param}"), request.param)
    return root, make_report(root, echo=lambda *_: None)


def test_the_sensitivity_table_uses_only_the_kept_lrs(depth_report):
    root, _ = depth_report
    table = pd.read_csv(root / "sensitivity.csv")
    assert list(table["layers"]) == list(DEPTHS)
    for row in table.to_dict("records"):
        assert row["max_stable_lr"] == max(LRS), row       # not POISONED_LR: its runs are left out
        assert row["n_lrs"] == len(LRS) and row["n_seeds"] == len(SEEDS), row
        assert row["n_left_out"] == len(SEEDS), row
        assert row["lr_sensitivity"] == pytest.approx(by_hand_sensitivity(row["layers"]), abs=1e-12)


def test_the_settings_and_grid_tables_count_no_left_out_run(depth_report):
    root, _ = depth_report
    for name in ("settings.csv", "final_val_loss.csv", "lr_sensitivity.csv", "depth_sweep.csv"):
        table = pd.read_csv(root / name)
        for row in table.to_dict("records"):
            if row["lr"] == POISONED_LR:
                assert row["n"] == 0 and math.isnan(row["mean"]) and row["n_stalled"] == 0, (name, row)
                assert math.isnan(row["baseline_loss"]), (name, row)  # read from no run
                if "n_learned" in row:
                    assert row["n_learned"] == 0 and row["n_left_out"] == len(SEEDS), (name, row)
            else:
                want = statistics.mean(loss(row["lr"], row["layers"], s) for s in SEEDS)
                assert row["n"] == len(SEEDS) and row["mean"] == pytest.approx(want, abs=1e-12), (name, row)


def test_the_depth_table_finds_no_depth_at_a_poisoned_lr(depth_report):
    root, _ = depth_report
    table = pd.read_csv(root / "depth.csv", dtype={"depths": str})
    rows = {r["lr"]: r for r in table.to_dict("records")}
    assert set(rows) == {*LRS, POISONED_LR}
    poisoned = rows[POISONED_LR]
    assert pd.isna(poisoned["deepest_learning_layers"]) and pd.isna(poisoned["depths"]), poisoned
    assert poisoned["n_seeds"] == 0 and poisoned["n_left_out"] == len(DEPTHS) * len(SEEDS)
    for lr in LRS:
        assert rows[lr]["deepest_learning_layers"] == max(DEPTHS) and rows[lr]["depths"] == "2 4 8"
        assert rows[lr]["n_seeds"] == len(SEEDS) and rows[lr]["n_left_out"] == 0


def test_the_transfer_tables_end_at_the_last_kept_lr(depth_report):
    root, _ = depth_report
    edges = pd.read_csv(root / "transfer_edges.csv")
    assert list(edges["layers"]) == list(DEPTHS)
    assert (edges["last_stable"] == max(LRS)).all() and edges["first_unstable"].isna().all(), edges
    assert (edges["upper_edge"] == "upper bound").all() and (edges["lrs"] == len(LRS)).all()
    assert (edges["seeds"] == len(SEEDS)).all()
    lrs = pd.read_csv(root / "transfer_lrs.csv")
    for row in lrs.to_dict("records"):  # the lowest mean of the kept lrs is at 2e-3 at every depth
        assert row["best_grid_lr"] == 2e-3 and row["last_stable"] == max(LRS), row


def test_the_runs_table_still_lists_every_run_and_why_it_is_left_out(depth_report):
    root, result = depth_report
    runs = pd.read_csv(root / "runs.csv", keep_default_na=False)
    assert len(runs) == (len(LRS) + 1) * len(DEPTHS) * len(SEEDS)
    out = runs[runs["lr"] == POISONED_LR]
    assert (out["left_out"] != "").all() and (runs[runs["lr"] != POISONED_LR]["left_out"] == "").all()
    assert len(result["left_out"]) == len(out)


@pytest.mark.parametrize("kind", sorted(POISON))
def test_the_width_table_uses_only_the_kept_runs(tmp_path, kind):
    from normexp.analysis import transfer
    from normexp.analysis.report.tables import sort_key, varied_keys
    from normexp.runs.reading import read_runs

    widths = {32: 2, 64: 4}
    for lr in (*LRS, POISONED_LR):
        for d_model, heads in widths.items():
            for seed in SEEDS:
                summary = (poisoned_summary(kind) if lr == POISONED_LR
                           else {"status": "completed", "final_val_loss": loss(lr, d_model, seed)})
                write_run(tmp_path, {"lr": lr, "d_model": d_model, "heads": heads, "seed": seed},
                          [f"width=w{d_model}", f"lr={lr}", f"seed={seed}"], summary)
    runs = read_runs(tmp_path)
    keys = varied_keys(runs)
    table = transfer.width_table(runs, keys, sort_key)
    assert list(table["d_model"]) == list(widths)
    for row in table.to_dict("records"):
        assert row["max_stable_lr"] == max(LRS) and row["highest_calm_lr"] == max(LRS), row
        assert row["n"] == len(SEEDS), row
        assert row["lr_sensitivity"] == pytest.approx(by_hand_sensitivity(row["d_model"]), abs=1e-12)
    signals = transfer.signals_by_lr(runs, keys, sort_key)
    assert (signals[signals["lr"] == POISONED_LR]["n"] == 0).all()
    assert (signals[signals["lr"] != POISONED_LR]["n"] == len(SEEDS)).all()


def _run(seed: int, final: float, scalars: dict, lr: float = 1e-3, layers: int = 2):
    from normexp.runs.reading import Run

    summary = {"status": "completed", "final_val_loss": final, "initial_loss": 5.5, "baseline_loss": BASELINE}
    return Run(Path(f"r{lr}{layers}{seed}"), f"r{lr}{layers}{seed}", {"lr": lr, "layers": layers, "seed": seed}, [],
               summary, scalars)


def test_the_model_update_table_reads_only_the_kept_runs():
    """Seed 1 says completed with an Infinity final loss: its model update (5.0) must not enter."""
    from normexp.analysis import study
    from normexp.analysis.report.tables import sort_key
    from normexp.runs.schema import MODEL_UPDATE

    runs = [_run(0, 2.0, {MODEL_UPDATE: [(0, 0.0), (10, 0.5)]}), _run(1, float("inf"), {MODEL_UPDATE: [(10, 5.0)]})]
    row = study.model_update_table(runs, ["layers"], sort_key).iloc[0]
    assert row["n"] == 1 and row["mean"] == 0.5 and row["step"] == 10


def test_the_loss_curves_draw_no_run_whose_summary_is_refused(tmp_path):
    """A cell whose only run says completed with a NaN final loss has no curve in val_loss.csv;
    the other cell's curve is its runs' mean, step by step."""
    from normexp.analysis.report.figures import plot_val_curves
    from normexp.runs.schema import VAL_LOSS

    good = [_run(s, 2.0, {VAL_LOSS: [(0, 5.0 + s), (10, 2.0 + s)]}, lr=1e-3) for s in SEEDS]
    bad = _run(0, float("nan"), {VAL_LOSS: [(0, 5.0), (10, 9.0)]}, lr=1e-2)
    for i, r in enumerate([*good, bad], 1):
        r.index = i
    assert plot_val_curves([*good, bad], ["lr"], tmp_path / "val_loss.png") is None
    drawn = pd.read_csv(tmp_path / "val_loss.csv")
    assert set(drawn["lr"]) == {1e-3}
    assert list(drawn["mean"]) == [statistics.mean([5.0, 6.0]), statistics.mean([2.0, 3.0])]


# ------------------------------------------------ item 5: nothing usable, nothing half-written

def every_run_left_out(root: Path) -> Path:
    for lr in LRS:
        write_run(root, {"lr": lr, "seed": 0}, [f"lr={lr}", "seed=0"], poisoned_summary("truncated"))
        write_run(root, {"lr": lr, "seed": 1}, [f"lr={lr}", "seed=1"], poisoned_summary("nan"))
        write_run(root, {"lr": lr, "seed": 2}, [f"lr={lr}", "seed=2"], poisoned_summary("inf"))
    return root


def test_a_folder_no_run_of_which_can_be_used_is_one_line_exit_2_and_writes_nothing(tmp_path, cli_env):
    root = every_run_left_out(tmp_path / "sweep")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    proc = run_cli(["report", str(root)], cli_env, check=False, timeout=SAFETY_NET_S)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "no run could be used" in lines[0] and "3 have a summary.json or config that does not read" in lines[0], lines[0]
    assert "6 say completed beside a final_val_loss that is not a finite number" in lines[0], lines[0]
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


def test_a_report_that_fails_midway_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    """The files are staged and moved into place only when all were written: a section that
    raises after the settings table and the figures were drawn leaves no file and no staging folder."""
    import normexp.analysis.report as report

    root = depth_grid(tmp_path / "sweep", "inf")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))

    def broken(*_a, **_k):
        raise RuntimeError("a bug halfway")

    monkeypatch.setitem(report.SECTIONS, "depth", dataclasses.replace(report.SECTIONS["depth"], write=broken))
    with pytest.raises(RuntimeError, match="a bug halfway"):
        report.make_report(root, echo=lambda *_: None)
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before


def test_a_sweep_that_diverged_before_any_finite_loss_still_reports(tmp_path):
    """Every run diverged at step 0 without an initial loss: kept (they did not learn), no mean
    anywhere; the lr figure has no point for its log axis and is drawn without one."""
    from normexp.analysis.report import make_report

    for lr in LRS:
        write_run(tmp_path, {"lr": lr, "seed": 0}, [f"lr={lr}", "seed=0"],
                  {"status": "diverged", "final_val_loss": None, "initial_loss": None, "diverged_at_step": 0})
    make_report(tmp_path, echo=lambda *_: None)
    table = pd.read_csv(tmp_path / "sensitivity.csv")
    assert pd.isna(table["max_stable_lr"].iloc[0]) and table["n_lrs"].iloc[0] == 0
    assert (tmp_path / "lr_sensitivity.png").is_file() and (tmp_path / "report.md").is_file()


# ------------------------------------------------------------- item 6: words that mislead

def test_a_transfer_section_skipped_for_too_few_lrs_says_so(tmp_path):
    from normexp.analysis.report import make_report

    for lr in LRS[:2]:
        for layers in DEPTHS[:2]:
            write_run(tmp_path, {"lr": lr, "layers": layers, "seed": 0}, [f"lr={lr}", f"layers={layers}", "seed=0"],
                      {"status": "completed", "final_val_loss": loss(lr, layers, 0)})
    result = make_report(tmp_path, echo=lambda *_: None)
    note = ("the lr transfer across depth (depth_transfer's section: transfer tables and figures) is skipped: it "
            "needs 3 lrs or more crossed with 2 layers values or more, and the runs hold 2 lrs and 2 layers values")
    assert note in result["notes"], result["notes"]
    assert f"- {note}" in (tmp_path / "report.md").read_text()
    assert not (tmp_path / "transfer_edges.csv").exists()


def test_resume_of_a_missing_folder_says_it_does_not_exist(tmp_path, cli_env):
    proc = run_cli(["resume", str(tmp_path / "nope")], cli_env, check=False, timeout=SAFETY_NET_S)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"normexp: error: {tmp_path / 'nope'}: does not exist; give a run's folder "
                                   "(runs/<date>/<time>) or a sweep's (runs/multirun/<date>/<time>)")
