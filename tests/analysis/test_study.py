"""Seeds as replicates, the unigram baseline, stalled runs, LR sensitivity, and runs as data.

The grid test trains 2 placements × 3 learning rates × 3 seeds (4 steps of a tiny model,
one lr absurd enough to diverge) through the real command line, then checks the report's
numbers against a computation by hand from the runs' own summary.json files."""

import json
import math
import random
import statistics
from pathlib import Path

import pytest

from conftest import TINY, cli_environment, make_corpus, read_csv, read_summary, run_cli, sweep_summaries

LRS = (1e-3, 1e-2, 1e3)  # 1e3 diverges
T975_DF2 = 4.302653  # Student's t, 97.5 % quantile, 2 degrees of freedom
T975_DF1 = 12.706205  # ... and 1 degree of freedom


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    folder = tmp_path_factory.mktemp("study")
    corpus = make_corpus(folder / "corpus.txt")
    sweep = folder / "sweep"
    env = cli_environment(folder / "cache")
    run_cli(["train", "-m", "placement=pre,post", "lr=" + ",".join(map(str, LRS)), "seed=0,1,2", "steps=4",
             "warmup=0", "log_every=2", "eval_every=2", "data=text", f"data.files=[{corpus}]", *TINY,
             f"hydra.sweep.dir={sweep}"], env)
    from normexp.analysis.report import make_report

    make_report(sweep, echo=lambda *_: None)
    return sweep


def loss_of(s: dict) -> float:
    """By hand: a diverged run counts as its loss at initialisation."""
    return s["initial_loss"] if s["status"] == "diverged" else s["final_val_loss"]


def by_cell(sweep: Path) -> dict[tuple, list[dict]]:
    cells = {}
    for s in sweep_summaries(sweep):
        cells.setdefault((s["placement"], s["lr"]), []).append(s)
    return cells


@pytest.mark.slow
def test_grid_ran_with_a_diverged_lr_and_stalled_runs(grid):
    statuses = [s["status"] for s in sweep_summaries(grid)]
    assert len(statuses) == 18
    assert {s["status"] for s in sweep_summaries(grid) if s["lr"] == 1e3} == {"diverged"}
    assert "stalled" in statuses  # 4 steps learn nothing beyond the unigram level
    assert all(s["baseline_loss"] == pytest.approx(sweep_summaries(grid)[0]["baseline_loss"]) for s in sweep_summaries(grid))


@pytest.mark.slow
def test_settings_pool_seeds_with_t_intervals_by_hand(grid):
    rows = {(r["placement"], float(r["lr"])): r for r in read_csv(grid / "settings.csv")}
    assert "seed" not in read_csv(grid / "settings.csv")[0]  # seed is a replicate, not a varied key
    assert len(rows) == 6
    for cell, members in by_cell(grid).items():
        row, losses = rows[cell], [loss_of(s) for s in members]
        mean, half = statistics.mean(losses), T975_DF2 * statistics.stdev(losses) / math.sqrt(3)
        assert int(row["n"]) == 3
        assert float(row["mean"]) == pytest.approx(mean, abs=1e-6)
        assert float(row["low"]) == pytest.approx(mean - half, abs=1e-6)
        assert float(row["high"]) == pytest.approx(mean + half, abs=1e-6)
        assert int(row["n_diverged"]) == sum(s["status"] == "diverged" for s in members)
        assert int(row["n_stalled"]) == sum(s["status"] == "stalled" for s in members)
    # the figure's own data: lr_sensitivity.csv holds the cells it draws, the same numbers
    drawn = {(r["placement"], float(r["lr"])): r for r in read_csv(grid / "lr_sensitivity.csv")}
    assert drawn.keys() == rows.keys()
    for cell, row in rows.items():
        assert float(drawn[cell]["mean"]) == pytest.approx(float(row["mean"]), abs=1e-9)


def hand_bootstrap(cells: list[list[float]], samples: int = 4000) -> tuple[float, float]:
    rng = random.Random(12345)
    values = []
    for _ in range(samples):
        means = [statistics.mean(rng.choice(c) for _ in c) for c in cells]
        values.append(statistics.mean(m - min(means) for m in means))
    values.sort()
    return values[int(0.025 * samples)], values[int(0.975 * samples) - 1]


@pytest.mark.slow
def test_lr_sensitivity_and_max_stable_lr_by_hand(grid):
    rows = {r["placement"]: r for r in read_csv(grid / "sensitivity.csv")}
    assert set(rows) == {"pre", "post"}
    assert {"lr_sensitivity", "lr_sensitivity_low", "lr_sensitivity_high", "max_stable_lr", "n_seeds"} <= set(rows["pre"])
    for placement, row in rows.items():
        cells = [[min(loss_of(s), s["initial_loss"]) for s in by_cell(grid)[(placement, lr)]] for lr in LRS]
        means = [statistics.mean(c) for c in cells]
        assert float(row["lr_sensitivity"]) == pytest.approx(statistics.mean(m - min(means) for m in means), abs=1e-6)
        # the interval: a t-interval over seeds of seed k's share mean_η ℓ_k(η) − ℓ_k(η*), η* the best mean
        seeded = [{s["seed"]: min(loss_of(s), s["initial_loss"]) for s in by_cell(grid)[(placement, lr)]} for lr in LRS]
        best = LRS[means.index(min(means))]
        shares = [statistics.mean(c[k] for c in seeded) - seeded[LRS.index(best)][k] for k in (0, 1, 2)]
        half = T975_DF2 * statistics.stdev(shares) / math.sqrt(3)
        assert float(row["lr_sensitivity_low"]) == pytest.approx(statistics.mean(shares) - half, abs=1e-6)
        assert float(row["lr_sensitivity_high"]) == pytest.approx(statistics.mean(shares) + half, abs=1e-6)
        low, high = hand_bootstrap(cells)   # the old bootstrap, still written beside it
        width = max(high - low, 1e-3)
        assert float(row["lr_sensitivity_boot_low"]) == pytest.approx(low, abs=0.15 * width)
        assert float(row["lr_sensitivity_boot_high"]) == pytest.approx(high, abs=0.15 * width)
        learned = [lr for lr in LRS if all(s["status"] == "completed" and s["final_val_loss"]
                                           <= (1 - s["stall_margin"]) * s["baseline_loss"]
                                           for s in by_cell(grid)[(placement, lr)])]
        assert row["max_stable_lr"] == ("" if not learned else str(max(learned)))
        assert int(row["n_seeds"]) == 3
    md = (grid / "report.md").read_text()
    assert "## Learning-rate sensitivity" in md and "![final validation loss vs lr](lr_sensitivity.png)" in md
    for name in ("lr_sensitivity.png", "val_loss.png", "final_val_loss.png", "grad_norm_layers.png"):
        assert (grid / name).read_bytes()[:4] == b"\x89PNG" and (grid / name).with_suffix(".csv").is_file()


@pytest.mark.slow
def test_val_curve_csv_is_the_seed_mean(grid):
    from normexp.runs import reading as runs

    curves = runs.scalars(grid, "val/loss")
    frame = runs.load(grid)
    drawn = read_csv(grid / "val_loss.csv")
    pre = frame[(frame["placement.name"] == "pre") & (frame["lr"] == 1e-3)]["run"]
    at2 = curves[curves["run"].isin(pre) & (curves["step"] == 2)]["value"]
    row = next(r for r in drawn if r["placement"] == "pre" and float(r["lr"]) == 1e-3 and r["step"] == "2")
    assert len(at2) == 3 and float(row["mean"]) == pytest.approx(at2.mean(), abs=1e-6) and row["n"] == "3"


@pytest.mark.slow
def test_runs_load_and_scalars(grid):
    from normexp.runs import reading as runs

    df = runs.load(grid)
    assert len(df) == 18
    assert {"run", "status", "final_val_loss", "initial_loss", "baseline_loss", "placement.name", "lr", "seed",
            "norm.name"} <= set(df.columns)
    for s_path in grid.glob("*/summary.json"):
        s, row = json.loads(s_path.read_text()), df[df["run"] == s_path.parent.name].iloc[0]
        assert (row["status"], row["placement.name"], row["lr"], row["seed"]) == (s["status"], s["placement"], s["lr"], s["seed"])
    long = runs.scalars(grid, ["val/loss", "grad_norm/layer_*"])
    assert list(long.columns) == ["run", "tag", "step", "value"]
    assert set(long["tag"]) == {"val/loss", "grad_norm/layer_00", "grad_norm/layer_01"}
    done = df[df["status"] != "diverged"]
    for run, final in zip(done["run"], done["final_val_loss"]):
        last = long[(long["run"] == run) & (long["tag"] == "val/loss")].sort_values("step")["value"].iloc[-1]
        assert last == pytest.approx(final, rel=1e-6)
    with pytest.raises(FileNotFoundError):
        runs.load(grid / "missing")


def test_baseline_is_the_unigram_entropy_and_a_tiny_lr_stalls(tmp_path, cli_env):
    """A 3-step run at lr 1e-7 ends where it started, far above the unigram level: stalled, exit 0.
    Its baseline_loss is the entropy of the val file's byte frequencies, computed here by hand."""
    train = make_corpus(tmp_path / "train.txt", 8000)
    val_text = "abracadabra, said the queen.\n" * 20  # ends with a newline: read as it is
    (tmp_path / "val.txt").write_text(val_text)
    counts = {}
    for b in val_text.encode():
        counts[b] = counts.get(b, 0) + 1
    entropy = -sum(c / len(val_text) * math.log(c / len(val_text)) for c in counts.values())
    run = tmp_path / "run"
    proc = run_cli(["train", "data=text", f"data.files=[{train}]", f"data.val_files=[{tmp_path / 'val.txt'}]",
                    "steps=3", "lr=1e-7", "warmup=0", *TINY, f"hydra.run.dir={run}"], cli_env)
    assert proc.returncode == 0
    s = read_summary(run)
    assert s["baseline_loss"] == pytest.approx(entropy, abs=1e-6)
    assert s["status"] == "stalled" and s["final_val_loss"] > (1 - 0.02) * s["baseline_loss"]
    # an old cache entry without the baseline gets it computed from the tokens and written back
    from normexp.data.batches import load_corpus

    meta_path = next((tmp_path / "cache" / "tokens").glob("*/meta.json"))
    meta = json.loads(meta_path.read_text())
    del meta["baseline_loss"]
    meta_path.write_text(json.dumps(meta))
    corpus = load_corpus({"name": "text", "files": [str(train)], "val_files": [str(tmp_path / "val.txt")]},
                         {"name": "byte", "vocab_size": 256}, cache_dir=tmp_path / "cache", progress=False)
    assert corpus.baseline_loss == pytest.approx(entropy, abs=1e-6)
    assert json.loads(meta_path.read_text())["baseline_loss"] == pytest.approx(entropy, abs=1e-6)


def test_a_run_that_learns_is_completed(tmp_path, cli_env, corpus):
    run = tmp_path / "run"
    run_cli(["train", "data=text", f"data.files=[{corpus}]", *LEARNS, *TINY, f"hydra.run.dir={run}"], cli_env)
    s = read_summary(run)
    assert s["status"] == "completed", s
    assert s["final_val_loss"] <= (1 - s["stall_margin"]) * s["baseline_loss"]


LEARNS = ["steps=60", "lr=3e-3", "warmup=0", "batch_size=16", "eval_every=60", "log_every=20"]


def test_the_stall_rule_by_hand():
    """Learned means final <= (1 - margin) · baseline: 2 % below a baseline of 3.0 is 2.94."""
    from normexp.runs.summary import beat_baseline

    assert beat_baseline(2.94, 3.0, 0.02) and beat_baseline(2.5, 3.0, 0.02)
    assert not beat_baseline(2.95, 3.0, 0.02) and not beat_baseline(2.99, 3.0, 0.02) and not beat_baseline(3.2, 3.0, 0.02)
    assert beat_baseline(2.95, 3.0, 0.01) and not beat_baseline(2.95, 3.0, 0.2)
    assert not beat_baseline(float("nan"), 3.0, 0.02) and not beat_baseline(None, 3.0, 0.02)
    assert beat_baseline(2.99, None, 0.02)  # a run without a baseline (older cache) counts a finite loss


# --------------------------------------------------------------------- unit checks

def fake_run(placement, lr, seed, status, final, initial=5.5, baseline=3.0):
    from normexp.runs.reading import Run

    cfg = {"placement.name": placement, "lr": lr, "seed": seed}
    summary = {"status": status, "final_val_loss": final, "initial_loss": initial, "baseline_loss": baseline}
    return Run(Path(f"{placement}{lr}{seed}"), "x", cfg, [], summary)


def test_max_stable_lr_needs_every_seed_and_diverged_counts_as_initial_loss():
    from normexp.analysis import study
    from normexp.analysis.report.tables import sort_key

    runs = [fake_run("post", lr, seed, status, final) for lr, seed, status, final in [
        (1e-3, 0, "completed", 2.0), (1e-3, 1, "completed", 2.2),
        (1e-2, 0, "completed", 2.1), (1e-2, 1, "stalled", 3.0),     # one seed stalled: not stable
        (1e-1, 0, "diverged", None), (1e-1, 1, "diverged", None)]]  # both count as 5.5
    row = study.sensitivity_table(runs, ["placement.name", "lr"], sort_key).iloc[0]
    assert row["max_stable_lr"] == 1e-3
    means = [2.1, 2.55, 5.5]
    assert row["lr_sensitivity"] == pytest.approx(sum(m - 2.1 for m in means) / 3)
    assert row["lr_sensitivity_low"] <= row["lr_sensitivity"] <= row["lr_sensitivity_high"]
    cell = study.cell_stats([r for r in runs if r.config["lr"] == 1e-1])
    assert (cell["n"], cell["n_diverged"], cell["mean"]) == (2, 2, 5.5)
    one = study.cell_stats(runs[:1])
    assert one["n"] == 1 and math.isnan(one["low"]) and math.isnan(one["high"])  # n=1: no interval


def test_lr_sensitivity_without_the_diverged_lrs_by_hand():
    """The lr where a seed diverged leaves the calm measure whole (every seed there), even where
    another seed at it did not diverge. By hand, lrs 1e-3 and 1e-2: seed 0 2.0, 3.0; seed 1 2.2, 3.4;
    best mean at 1e-3; d_0 = 2.5 − 2.0 = 0.5, d_1 = 2.8 − 2.2 = 0.6: 0.55 ± t₀.₉₇₅,₁ · 0.0707/√2."""
    from normexp.analysis import study
    from normexp.analysis.report.tables import sort_key

    runs = [fake_run("pre", lr, seed, status, final) for lr, seed, status, final in [
        (1e-3, 0, "completed", 2.0), (1e-3, 1, "completed", 2.2),
        (1e-2, 0, "completed", 3.0), (1e-2, 1, "stalled", 3.4),
        (1e-1, 0, "diverged", None), (1e-1, 1, "stalled", 3.3)]]
    row = study.sensitivity_table(runs, ["placement.name", "lr"], sort_key).iloc[0]
    half = 12.706204736174698 * math.sqrt(0.005) / math.sqrt(2)
    assert row["lr_sensitivity_calm"] == pytest.approx(0.55)
    assert (row["lr_sensitivity_calm_low"], row["lr_sensitivity_calm_high"]) == pytest.approx((0.55 - half, 0.55 + half))
    assert row["n_lrs_calm"] == 2 and row["n_lrs"] == 3
    assert row["lr_sensitivity"] > row["lr_sensitivity_calm"]   # the full one counts seed 0 at ℓ₀ = 5.5
    assert math.isnan(study.calm_sensitivity([{0: 2.0}, {0: 3.0}], [False, True])[0])  # one calm lr: no measure


def test_the_width_calm_table_recomputes_from_runs_csv(tmp_path):
    """refresh_width on a runs.csv written by hand: the same numbers as sensitivity_table on the runs."""
    from normexp.analysis.report.transfer_sections import refresh_width

    lines = ["run,qk_norm,z_loss,lr,d_model,seed,status,final_val_loss,left_out"]
    grid = [(1e-3, 0, "completed", 2.0), (1e-3, 1, "completed", 2.2), (1e-2, 0, "completed", 3.0),
            (1e-2, 1, "stalled", 3.4), (1e-1, 0, "diverged", 9.0), (1e-1, 1, "stalled", 3.3)]
    lines += [f"{i},False,0,{lr},64,{seed},{status},{loss}," for i, (lr, seed, status, loss) in enumerate(grid)]
    (tmp_path / "runs.csv").write_text("\n".join(lines) + "\n")
    row = read_csv(refresh_width(tmp_path, ["qk_norm", "z_loss"]))[0]
    assert float(row["lr_sensitivity_calm"]) == pytest.approx(0.55)
    assert row["n_lrs_calm"] == "2" and row["lrs_left_out"] == "0.1"


def test_lr_sensitivity_clips_a_run_that_ended_above_its_initial_loss():
    """min(ℓ(η), ℓ₀): a run that ends worse than it started counts as ℓ₀ (5.5), not as 6.0.
    By hand: cell means 2.1 and (5.5 + 5.0)/2 = 5.25, best 2.1, sensitivity (0 + 3.15)/2."""
    from normexp.analysis import study
    from normexp.analysis.report.tables import sort_key

    runs = [fake_run("pre", lr, seed, status, final) for lr, seed, status, final in [
        (1e-3, 0, "completed", 2.0), (1e-3, 1, "completed", 2.2),
        (1e-2, 0, "stalled", 6.0), (1e-2, 1, "stalled", 5.0)]]
    row = study.sensitivity_table(runs, ["placement.name", "lr"], sort_key).iloc[0]
    assert row["lr_sensitivity"] == pytest.approx((0 + (5.25 - 2.1)) / 2)


def test_t_quantiles():
    from normexp.analysis.study import t975

    assert t975(2) == pytest.approx(T975_DF2, abs=1e-3)
    assert t975(40) == pytest.approx(2.021075, abs=1e-3)
    assert t975(1000) == pytest.approx(1.962339, abs=1e-3)


def test_depth_table_and_figure_data(tmp_path):
    """Critical depth: the deepest stack at which every seed learned; the depth figure's CSV
    holds the cells it draws."""
    from normexp.analysis import study
    from normexp.analysis.report.figures import plot_sweep
    from normexp.analysis.report.tables import sort_key

    runs = []
    for placement, outcomes in {"post": {6: ("completed", "completed"), 24: ("completed", "stalled"), 96: ("stalled",) * 2},
                                "deepnorm": {6: ("completed",) * 2, 24: ("completed",) * 2, 96: ("completed", "diverged")}}.items():
        for layers, statuses in outcomes.items():
            for seed, status in enumerate(statuses):
                r = fake_run(placement, 1e-3, seed, status, 2.0 if status == "completed" else 3.1)
                r.config["layers"] = layers
                runs.append(r)
    table = study.depth_table(runs, ["placement.name", "layers"], sort_key)
    assert dict(zip(table["placement.name"], table["deepest_learning_layers"])) == {"deepnorm": 24, "post": 6}
    plot_sweep(runs, ["placement.name", "layers"], "layers", tmp_path / "depth_sweep.png")
    drawn = {(r["placement"], int(r["layers"])): r for r in read_csv(tmp_path / "depth_sweep.csv")}
    assert float(drawn[("deepnorm", 96)]["mean"]) == pytest.approx((2.0 + 5.5) / 2)  # diverged = initial loss
    assert drawn[("post", 24)]["n_stalled"] == "1" and drawn[("deepnorm", 96)]["n_diverged"] == "1"


def test_early_model_update_against_depth_by_hand(tmp_path):
    """The depth section's model-update figure: per cell the mean over seeds of the first value
    after step 0 (step 0 is θ_0 itself, always 0), with its t-interval, written to its CSV."""
    from normexp.analysis import study
    from normexp.analysis.report.figures import plot_sweep
    from normexp.analysis.report.tables import sort_key

    values = {("post", 6): (0.30, 0.50), ("post", 96): (2.0, 4.0), ("deepnorm", 6): (0.10, 0.20),
              ("deepnorm", 96): (0.05, 0.15)}
    runs = []
    for (placement, layers), pair in values.items():
        for seed, v in enumerate(pair):
            r = fake_run(placement, 1e-3, seed, "completed", 2.0)
            r.config["layers"] = layers
            r.scalars["stability/model_update"] = [(0, 0.0), (25, v), (50, 10 * v)]
            runs.append(r)
    keys = ["placement.name", "layers"]
    assert study.early_model_update(runs[0]) == (25, 0.30)
    plot_sweep(runs, keys, "layers", tmp_path / "depth_model_update.png", cell_table=study.model_update_table, log_y=True)
    drawn = {(r["placement"], int(r["layers"])): r for r in read_csv(tmp_path / "depth_model_update.csv")}
    for cell, (a, b) in values.items():
        mean, half = (a + b) / 2, T975_DF1 * abs(a - b) / 2  # s = |a-b|/√2, n = 2: t·s/√n = t·|a-b|/2
        assert float(drawn[cell]["mean"]) == pytest.approx(mean)
        assert float(drawn[cell]["low"]) == pytest.approx(mean - half) and float(drawn[cell]["high"]) == pytest.approx(mean + half)
        assert drawn[cell]["n"] == "2" and float(drawn[cell]["step"]) == 25


def test_seed_and_a_key_only_newer_runs_have_are_not_varied():
    from normexp.analysis.report.tables import varied_keys
    from normexp.runs.reading import Run

    old = [Run(Path(f"o{s}"), "o", {"lr": 1e-3, "seed": s}, [], {}) for s in (0, 1)]
    new = [Run(Path(f"n{s}"), "n", {"lr": 1e-2, "seed": s, "log.profiles_every": "auto"}, [], {}) for s in (0, 1)]
    assert varied_keys(old + new) == ["lr"]


@pytest.mark.slow
def test_grid_and_layer_figures_write_the_data_they_draw(grid):
    from normexp.runs import reading as runs

    cells = {(r["placement"], r["lr"]): r["mean"] for r in read_csv(grid / "settings.csv")}
    drawn = {(r["placement"], r["lr"]): r["mean"] for r in read_csv(grid / "final_val_loss.csv")}
    assert drawn == cells  # the heatmap's cells are the seed-pooled settings
    frame = runs.load(grid).set_index("run")
    curves = runs.scalars(grid, "grad_norm/layer_*")
    for row in read_csv(grid / "grad_norm_layers.csv"):
        tag = f"grad_norm/layer_{int(row['layer']):02d}"
        want = curves[(curves["run"] == row["path"]) & (curves["tag"] == tag) & (curves["step"] == int(row["step"]))]
        assert float(row["value"]) == pytest.approx(want["value"].iloc[0], rel=1e-6)
        assert row["placement"] == frame.loc[row["path"], "placement.name"]
