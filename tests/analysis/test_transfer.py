"""The transfer sections of `normexp report` (issue 42) on synthetic grids with a known answer:
losses on a parabola in log lr whose vertex moves as a set power of depth, a stability limit that
halves per ×4 depth, per-block update RMS and Wortsman's instability signals written in by hand."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import RAN_TO_THE_END, SAFETY_NET_S, cli_environment, make_corpus, run_cli, sweep_summaries

from normexp.analysis import transfer
from normexp.analysis.report.transfer_sections import depth_transfer_section, width_section
from normexp.runs.reading import Run

LRS = [1e-3 * 2.0 ** k for k in range(-3, 7)]         # 1.25e-4 … 6.4e-2, ×2 apart
DEPTHS = (2, 8, 32)
SEEDS = (0, 1, 2)
SEED_OFFSET = {0: -0.02, 1: 0.0, 2: 0.03}             # a seed's loss shift, the same at every lr
CURVATURE, FLOOR, L0, BASELINE = 0.05, 2.0, 5.5, 3.3


def vertex(depth: int, slope: float) -> float:
    """The optimal lr the synthetic losses are built around: 3e-3 at 2 blocks, × (L/2)^slope."""
    return 3e-3 * (depth / 2) ** slope


def limit(depth: int) -> float:
    """The largest lr that learns: 3.2e-2 at 2 blocks, halved per ×4 depth (slope −½); above it, diverged."""
    return 3.2e-2 * (depth / 2) ** -0.5


def run(cfg: dict, loss: float | None, scalars: dict | None = None) -> Run:
    status = "diverged" if loss is None else "completed"
    summary = {"status": status, "final_val_loss": loss, "initial_loss": L0, "baseline_loss": BASELINE,
               "stall_margin": 0.02}
    name = ",".join(f"{k}={v}" for k, v in cfg.items())
    return Run(Path(name), name, cfg, [f"{k}={v}" for k, v in cfg.items()], summary, scalars or {})


def depth_grid(slopes: dict) -> list[Run]:
    """placement × exponent (depth_mup's only) × layers × lr × seed; loss = FLOOR + CURVATURE·(ln lr −
    ln vertex)² + the seed's offset; diverged above `limit`; update_rms/layer_XX = 0.01·(i+1)/L."""
    runs = []
    for (placement, exponent), slope in slopes.items():
        for depth in DEPTHS:
            for lr in LRS:
                for seed in SEEDS:
                    cfg = {"placement.name": placement, "layers": depth, "lr": lr, "seed": seed}
                    if exponent is not None:
                        cfg["placement.exponent"] = exponent
                    loss = FLOOR + CURVATURE * math.log(lr / vertex(depth, slope)) ** 2 + SEED_OFFSET[seed]
                    rms = {f"update_rms/layer_{i:02d}": [(0, 1.0), (100, 0.01 * (i + 1) / depth)] for i in range(depth)}
                    runs.append(run(cfg, None if lr > limit(depth) * 1.0001 else loss, rms))
    return runs


KEYS = ["placement.name", "placement.exponent", "layers", "lr"]
SLOPES = {("pre", None): -1.0, ("depth_mup", 1): 0.0}


@pytest.fixture(scope="module")
def depth_report(tmp_path_factory):
    """The depth section written once (its likelihood fit takes most of the time): (folder, its lines)."""
    out = tmp_path_factory.mktemp("depth_transfer")
    printed = []
    lines = depth_transfer_section(depth_grid(SLOPES), KEYS, out, printed.append)
    return out, lines, printed


@pytest.mark.slow  # the depth law's likelihood fit: ~20-50 s on the shared cores
def test_optimal_and_max_stable_lr_and_their_slopes_are_recovered(depth_report):
    """The optimum per depth is the parabola's vertex (three points of an exact parabola give it
    exactly); its slope against depth is the one the losses were built with (−1 for "pre", 0 for
    CompleteP); the max stable bracket is [limit, 2·limit] with a diverged (unstable) upper edge,
    and the depth law's slope through the brackets is −½."""
    tmp_path, lines, printed = depth_report
    table = pd.read_csv(tmp_path / "transfer_lrs.csv")
    assert len(table) == len(SLOPES) * len(DEPTHS)
    for (placement, exponent), slope in SLOPES.items():
        mine = table[table["placement"] == placement]
        for depth in DEPTHS:
            row = mine[mine["layers"] == depth].iloc[0]
            assert row["optimal_kind"] == "optimum"
            assert row["optimal_lr"] == pytest.approx(vertex(depth, slope), rel=1e-6)
            assert row["optimal_lr_low"] <= vertex(depth, slope) <= row["optimal_lr_high"]
            assert row["last_stable"] == pytest.approx(limit(depth)) and row["upper_edge"] == "unstable"
            assert row["first_failing"] == pytest.approx(2 * limit(depth))
    slopes = pd.read_csv(tmp_path / "transfer_slopes.csv")
    for (placement, _), slope in SLOPES.items():
        row = slopes[slopes["placement"] == placement].iloc[0]
        assert float(row["slope [95 %]"].split()[0]) == pytest.approx(-0.5, abs=0.005)   # brackets' middles
        assert float(row["optimal lr slope [95 %]"].split()[0]) == pytest.approx(slope, abs=0.005)
    assert "## Does the lr transfer across depth?" in lines
    for name in ("transfer.png", "transfer_law.png", "transfer_update_rms.png", "transfer_edges.csv"):
        assert (tmp_path / name).is_file(), name


@pytest.mark.slow  # the depth law's likelihood fit: ~20-50 s on the shared cores
def test_the_transfer_figure_holds_every_cell_with_its_seed_interval(depth_report):
    """transfer.csv beside transfer.png: one cell per line × depth × lr, its mean the mean over the
    three seeds (a diverged run counted as ℓ₀) and its interval the t-interval of those seeds."""
    cells = pd.read_csv(depth_report[0] / "transfer.csv")
    assert len(cells) == len(SLOPES) * len(DEPTHS) * len(LRS)
    offsets = np.array(list(SEED_OFFSET.values()))
    half = 4.302653 * offsets.std(ddof=1) / math.sqrt(3)          # t(0.975, 2)·s/√3
    for row in cells.to_dict("records"):
        slope = SLOPES[(row["placement"], 1 if row["placement"] == "depth_mup" else None)]
        if row["lr"] > limit(row["layers"]) * 1.0001:
            assert row["mean"] == pytest.approx(L0) and row["n_diverged"] == 3
            continue
        expected = FLOOR + CURVATURE * math.log(row["lr"] / vertex(row["layers"], slope)) ** 2 + offsets.mean()
        assert row["mean"] == pytest.approx(expected)
        assert row["high"] - row["mean"] == pytest.approx(half)


@pytest.mark.slow  # the depth law's likelihood fit: ~20-50 s on the shared cores
def test_update_rms_profile_is_read_at_each_depths_best_grid_lr(depth_report):
    """transfer_update_rms.csv: per line and depth, the blocks' update RMS at the last logged step
    (0.01·(i+1)/L by construction, the same in every seed) at the lr of the lowest mean loss."""
    profiles = pd.read_csv(depth_report[0] / "transfer_update_rms.csv")
    assert len(profiles) == len(SLOPES) * sum(DEPTHS)
    for row in profiles.to_dict("records"):
        slope = SLOPES[(row["placement"], 1 if row["placement"] == "depth_mup" else None)]
        best = min(LRS, key=lambda lr: abs(math.log(lr / vertex(row["layers"], slope))))
        assert row["lr"] == pytest.approx(best) and row["n"] == 3
        assert row["mean"] == pytest.approx(0.01 * (row["block"] + 1) / row["layers"])
        assert row["position"] == pytest.approx((row["block"] + 0.5) / row["layers"])


def test_a_grid_needs_three_lrs_and_two_sizes():
    runs = depth_grid({("pre", None): -1.0})
    keys = ["placement.name", "layers", "lr"]
    assert transfer.is_grid(runs, ["layers", "lr"], "layers")
    assert not transfer.is_grid([r for r in runs if r.config["layers"] == 2], ["lr"], "layers")
    assert not transfer.is_grid([r for r in runs if r.config["lr"] in LRS[:2]], keys, "layers")


WIDTH_LRS = (1e-3, 1e-2, 1e-1, 1.0)
WIDTHS = (32, 64)


def width_grid() -> tuple[list[Run], dict]:
    """qk_norm × d_model (heads = d_model/16) × lr × seed. Loss: per (variant, width) a table by lr
    plus the seed's offset; without qk_norm at width 64 lr 1 diverges. attn_logit_max per block and
    output/log_z at the last step: known numbers per (variant, width, lr, seed)."""
    base = {False: [2.6, 2.2, 2.4, 3.0], True: [2.5, 2.2, 2.25, 2.4]}
    runs, expected = [], {}
    for qk in (False, True):
        for width in WIDTHS:
            for j, lr in enumerate(WIDTH_LRS):
                for seed in SEEDS:
                    cfg = {"qk_norm": qk, "d_model": width, "heads": width // 16, "lr": lr, "seed": seed}
                    diverged = not qk and width == 64 and lr == 1.0
                    logit = (10.0 if qk else 100.0) * (j + 1) * width / 32 + seed
                    scalars = {"attn_logit_max/layer_00": [(50, 1.0), (100, logit / 2)],
                               "attn_logit_max/layer_01": [(50, 1.0), (100, logit)],
                               "output/log_z": [(50, 0.0), (100, 5.0 + j + seed / 10)]}
                    loss = None if diverged else base[qk][j] + width / 1000 + SEED_OFFSET[seed]
                    runs.append(run(cfg, loss, scalars))
            expected[(qk, width)] = base[qk]
    return runs, expected


def test_width_table_has_sensitivity_and_the_signals_at_the_highest_lr_that_did_not_diverge(tmp_path):
    """LR sensitivity = mean over lrs of (mean loss − best mean), a diverged run at ℓ₀ (Wortsman
    et al. §3), computed here from the built losses; the signals at the highest lr where no seed
    diverged (1.0, or 0.1 where 1.0 diverged): the largest block's logit and log Z, mean of 3 seeds."""
    runs, base = width_grid()
    lines = width_section(runs, ["qk_norm", "d_model", "heads", "lr"], tmp_path, lambda *_: None)
    table = pd.read_csv(tmp_path / "width.csv", dtype={"diverged_lrs": str})
    assert len(table) == 4
    for row in table.to_dict("records"):
        qk, width = bool(row["qk_norm"]), int(row["d_model"])
        means = np.array(base[(qk, width)]) + width / 1000 + np.mean(list(SEED_OFFSET.values()))
        if not qk and width == 64:
            means[-1] = L0
        assert row["lr_sensitivity"] == pytest.approx(np.mean(means - means.min()))
        top = 0.1 if (not qk and width == 64) else 1.0
        j = WIDTH_LRS.index(top)
        assert row["highest_calm_lr"] == pytest.approx(top)
        diverged = row["diverged_lrs"] if isinstance(row["diverged_lrs"], str) else ""  # an empty cell reads as NaN
        assert diverged == ("1" if top == 0.1 else "")
        assert row["attn_logit_max"] == pytest.approx((10.0 if qk else 100.0) * (j + 1) * width / 32 + 1)
        assert row["log_z"] == pytest.approx(5.0 + j + 0.1) and row["n"] == 3
        assert row["heads"] == width // 16
    signals = pd.read_csv(tmp_path / "width_signals.csv")
    assert len(signals) == 2 * len(WIDTHS) * len(WIDTH_LRS)
    assert "## LR sensitivity and instability signals against width" in lines
    assert (tmp_path / "width_sensitivity.png").is_file() and (tmp_path / "width_signals.png").is_file()


def test_a_variant_swept_as_0_and_1e_4_finds_its_sensitivity_at_0_too(tmp_path):
    """z_loss=0,1.0e-4: the runs say 0 (an int), the sensitivity table's column holds 0.0 (pandas
    makes the column float), and matching them by repr lost every z_loss=0 row (the real width
    study's table read "-" there). Losses as width_grid's, keyed by z_loss instead of qk_norm."""
    runs, base = [], {0: [2.6, 2.2, 2.4, 3.0], 1.0e-4: [2.5, 2.2, 2.25, 2.4]}
    for z in (0, 1.0e-4):
        for width in WIDTHS:
            for j, lr in enumerate(WIDTH_LRS):
                for seed in SEEDS:
                    cfg = {"z_loss": z, "d_model": width, "heads": width // 16, "lr": lr, "seed": seed}
                    runs.append(run(cfg, base[z][j] + width / 1000 + SEED_OFFSET[seed],
                                    {"attn_logit_max/layer_00": [(100, 1.0)], "output/log_z": [(100, 5.0)]}))
    width_section(runs, ["z_loss", "d_model", "heads", "lr"], tmp_path, lambda *_: None)
    table = pd.read_csv(tmp_path / "width.csv")
    assert len(table) == 4
    for row in table.to_dict("records"):
        means = np.array(base[0 if row["z_loss"] == 0 else 1.0e-4]) + row["d_model"] / 1000
        assert row["lr_sensitivity"] == pytest.approx(np.mean(means - means.min()))


# ------------------------------------------------------------------ the presets, end to end, shrunk

TINY_RUN = ["steps=4", "warmup=1", "log_every=2", "eval_every=2", "eval_batches=1", "seq_len=16", "batch_size=2",
            "log.progress=off", "threads=1"]


@pytest.mark.slow
def test_depth_transfer_preset_shrunk_runs_and_reports(tmp_path):
    """experiment=depth_transfer on the command line with 2 arms (Pre-LN, CompleteP), 2 depths, 3 lrs,
    1 seed, 4 steps of a 16-wide model: every run ends, CompleteP runs as depth_mup at exponent 1,
    and `normexp report` writes the transfer table (one row per arm and depth) and the update-RMS
    profile (logged with log.model_update off)."""
    env = cli_environment(tmp_path / "cache")
    corpus = make_corpus(tmp_path / "corpus.txt", n_bytes=20_000)
    out = tmp_path / "sweep"
    run_cli(["train", "-m", "experiment=depth_transfer", "arm=pre,completep", "layers=1,2", "lr=1e-3,1e-2,1e-1", "seed=0",
             "d_model=16", "heads=2", *TINY_RUN, "data=text", f"data.files=[{corpus}]", f"hydra.sweep.dir={out}"],
            env, timeout=SAFETY_NET_S)
    runs = sweep_summaries(out)
    assert len(runs) == 2 * 2 * 3 and all(s["status"] in RAN_TO_THE_END + ("diverged",) for s in runs)
    assert {(s["placement"], s["placement_settings"].get("exponent")) for s in runs} == {("pre", None),
                                                                                         ("depth_mup", 1.0)}
    report = run_cli(["report", str(out)], env, timeout=SAFETY_NET_S).stdout
    assert "lr transfer across depth" in report
    table = pd.read_csv(out / "transfer_lrs.csv")
    assert sorted(zip(table["placement"], table["layers"])) == [("depth_mup", 1), ("depth_mup", 2), ("pre", 1),
                                                                ("pre", 2)]
    profiles = pd.read_csv(out / "transfer_update_rms.csv")
    assert sorted(set(zip(profiles["placement"], profiles["layers"]))) == sorted(zip(table["placement"],
                                                                                     table["layers"]))
    assert (profiles["mean"] > 0).all() and "Does the lr transfer across depth?" in (out / "report.md").read_text()


@pytest.mark.slow
def test_width_proxies_preset_shrunk_runs_and_reports(tmp_path):
    """experiment=width_proxies with widths 32 and 64 (heads 2 and 4: head dimension 16), qk_norm
    on and off, 3 lrs, 1 seed, 4 steps: the widths set d_model and heads together, and the report's
    width table has one row per width × qk_norm with the attention logit and log Z read back."""
    env = cli_environment(tmp_path / "cache")
    corpus = make_corpus(tmp_path / "corpus.txt", n_bytes=20_000)
    out = tmp_path / "sweep"
    run_cli(["train", "-m", "experiment=width_proxies", "width=w32,w64", "z_loss=0",
             "lr=1e-3,1e-2,1e-1", "seed=0", "layers=1", *TINY_RUN, "data=text", f"data.files=[{corpus}]",
             f"hydra.sweep.dir={out}"], env, timeout=SAFETY_NET_S)
    runs = sweep_summaries(out)
    assert len(runs) == 2 * 2 * 3
    assert {(s["d_model"], s["heads"]) for s in runs} == {(32, 2), (64, 4)}
    report = run_cli(["report", str(out)], env, timeout=SAFETY_NET_S).stdout
    assert "width (LR sensitivity" in report
    table = pd.read_csv(out / "width.csv")
    assert sorted(zip(table["d_model"], table["qk_norm"])) == [(32, False), (32, True), (64, False), (64, True)]
    assert (table["attn_logit_max"] > 0).all() and table["log_z"].notna().all()
