"""The boundary search (normexp/boundary.py) by hand on synthetic outcome functions, and the
Hydra sweeper plugin end to end on a tiny model with the joblib launcher, resume included."""

import math
from pathlib import Path

import pytest
from conftest import TINY, make_corpus, read_csv, read_summary, run_cli

from normexp import boundary
from normexp.runfolder import find_runs


def search(outcome, lower=1e-4, upper=1e-1, ratio=1.25, first=4, seeds=(0, 1, 2), integer=False, settings=1):
    """Run searches against `outcome(x, seed, setting) -> status` (or None: the job failed);
    returns the searches and the batches launched."""
    searches = [boundary.Search((("placement", i),), lower, upper, ratio, integer) for i in range(settings)]
    batches = []

    def launch(batch):
        batches.append(batch)
        out = []
        for i, x, seed in batch:
            status = outcome(x, seed, i)
            out.append(None if status is None else {"status": status})
        return out

    points = boundary.initial_points(lower, upper, first, integer)
    boundary.search_all(searches, list(seeds), points, launch)
    return searches, batches


def threshold(t):
    return lambda x, seed, i: "completed" if x <= t else "stalled"


def test_initial_points_and_midpoints_by_hand():
    assert boundary.initial_points(1e-4, 1e-1, 4, False) == [1e-4, 1e-3, 1e-2, 1e-1]
    assert boundary.initial_points(6, 384, 4, True) == [6, 24, 96, 384]  # ×4 apart
    assert boundary.midpoint(1e-3, 1e-2, False) == 0.00316          # √(1e-5), 3 digits
    assert boundary.midpoint(48, 96, True) == 68                    # √4608 = 67.9
    assert boundary.midpoint(6, 8, True) == 7 and boundary.midpoint(6, 7, True) is None
    # a ×1.25 grid over ×1000 needs ⌈ln 1000 / ln 1.25⌉ = 31 steps, 32 points
    assert boundary.grid_runs(1e-4, 1e-1, 1.25, 3, False) == 32 * 3


@pytest.mark.parametrize("t", [2.3e-4, 0.0123, 0.061])
def test_a_monotone_boundary_is_bracketed_to_the_ratio(t):
    (s,), batches = search(threshold(t))
    low, high = s.bracket()
    assert low <= t < high and high / low <= 1.25
    assert s.monotone and s.verdict() == f"{low:g} .. {high:g}"
    # round 0: 4 points; then one midpoint a round, each halving the log-width of a ×10 bracket
    # until ≤ ×1.25: 10^(1/2^k) ≤ 1.25 needs k = 4 (±1 for the 3-digit rounding)
    assert len(batches[0]) == 4 * 3 and all(len(b) == 3 for b in batches[1:])
    assert 3 <= len(batches) - 1 <= 5
    assert s.runs == 3 * len(s.outcomes) == sum(map(len, batches))


def test_the_worst_seed_sets_the_boundary():
    (s,), _ = search(lambda x, seed, i: "completed" if x <= (0.02 if seed != 2 else 0.004) else "diverged")
    low, high = s.bracket()
    assert low <= 0.004 < high


def test_bounds_that_fail_or_hold_need_no_bisection():
    (none,), batches = search(threshold(1e-5))
    assert none.verdict() == "none" and none.bracket() == (None, 1e-4) and len(batches) == 1
    (held,), batches = search(threshold(1.0))
    assert held.verdict() == ">= 0.1" and held.bracket() == (0.1, None) and len(batches) == 1


def test_a_non_monotone_setting_is_flagged_and_its_points_kept():
    # unstable in a window around 1e-3 only, stable again above it up to 0.05
    def outcome(x, seed, i):
        return "completed" if x < 5e-4 or 2e-3 < x < 0.05 else "stalled"

    (s,), _ = search(outcome)
    assert not s.monotone
    low, high = s.bracket()
    assert low < 5e-4 <= high and high / low <= 1.25   # the first boundary, bracketed
    assert s.stable(1e-2) and not s.stable(1e-3)       # the later stable point is kept
    row = s.row("lr")
    assert row["monotone"] == "no" and row["points_probed"] == len(s.outcomes)


def test_a_failed_job_stops_its_search_and_is_no_outcome():
    # setting 0 fails at lr 1e-2 (e.g. a bad value); setting 1 searches on
    def outcome(x, seed, i):
        return None if (i == 0 and x == 1e-2 and seed == 1) else threshold(0.0123)(x, seed, i)

    (broken, fine), batches = search(outcome, settings=2)
    assert broken.error is not None and broken.verdict().startswith("failed")
    assert 1e-2 not in broken.outcomes or 1 not in broken.outcomes[1e-2]
    assert all(i == 1 for b in batches[1:] for i, _, _ in b)  # nothing more launched for it
    low, high = fine.bracket()
    assert low <= 0.0123 < high and high / low <= 1.25


def test_whole_numbers_for_depth():
    (s,), _ = search(threshold(50), lower=6, upper=384, integer=True, seeds=(0,))
    low, high = s.bracket()
    assert all(isinstance(x, int) for x in s.outcomes)
    assert low <= 50 < high and (high / low <= 1.25 or high - low == 1)


def test_settings_of_the_sweeper_are_checked():
    assert boundary.check_settings("lr", 1e-4, 1e-1, 1.25, 4) is None
    assert "lr or layers" in boundary.check_settings("warmup", 1, 10, 1.25, 4)
    assert "0 < lower < upper" in boundary.check_settings("lr", 1e-1, 1e-4, 1.25, 4)
    assert "0 < lower < upper" in boundary.check_settings("lr", 1e-4, math.inf, 1.25, 4)
    assert "whole numbers" in boundary.check_settings("layers", 6.5, 96, 1.25, 4)
    assert "> 1" in boundary.check_settings("lr", 1e-4, 1e-1, 1.0, 4)


# ------------------------------------------------------------------ end to end

def _sweep(tmp_path, env, ratio, resume=False):
    corpus = tmp_path / "corpus.txt"
    if not corpus.exists():
        make_corpus(corpus)
    args = ["train", "-m", "hydra/sweeper=boundary", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *TINY,
            "steps=150", "warmup=0", "schedule=constant", "data=text", f"data.files=[{corpus}]", "seed=0,1",
            "placement=post,pre", "hydra.sweeper.lower=1e-3", "hydra.sweeper.upper=10",
            f"hydra.sweeper.ratio={ratio}", "hydra.sweeper.initial_points=3", f"hydra.sweep.dir={tmp_path / 'sw'}"]
    return run_cli(args + ["resume=true"] * resume, env, timeout=600)


def _from_folders(sweep: Path) -> dict:
    """{placement: {lr: [status of each seed]}} read from the run folders' own files."""
    from omegaconf import OmegaConf

    out = {}
    for run in find_runs(sweep):
        cfg = OmegaConf.load(run / ".hydra" / "config.yaml")
        status = read_summary(run)["status"]
        out.setdefault(cfg.placement.name, {}).setdefault(cfg.lr, []).append(status)
    return out


@pytest.mark.slow
def test_the_sweeper_end_to_end_and_a_resumed_search(tmp_path, cli_env):
    proc = _sweep(tmp_path, cli_env, ratio=4)   # a coarse search, continued below to ×2
    sweep = tmp_path / "sw"
    first = {run: (run / "summary.json").stat().st_mtime_ns for run in find_runs(sweep)}
    assert "boundary of lr" in proc.stderr
    _sweep(tmp_path, cli_env, ratio=2, resume=True)
    runs = find_runs(sweep)
    assert all((r / "summary.json").stat().st_mtime_ns == first[r] for r in first)  # nothing retrained
    assert len(runs) > len(first)
    table = {row["placement"]: row for row in read_csv(sweep / "boundary.csv")}
    by_hand = _from_folders(sweep)
    assert set(table) == set(by_hand) == {"post", "pre"}
    for placement, points in by_hand.items():
        assert all(len(statuses) == 2 for statuses in points.values())  # both seeds at every point
        stable = {lr: all(s == "completed" for s in st) for lr, st in points.items()}
        unstable = [lr for lr, ok in stable.items() if not ok]
        first_unstable = min(unstable) if unstable else None
        below = [lr for lr, ok in stable.items() if ok and (first_unstable is None or lr < first_unstable)]
        last_stable = max(below) if below else None
        row = table[placement]
        assert (float(row["last_stable"]) if row["last_stable"] else None) == last_stable
        assert (float(row["first_unstable"]) if row["first_unstable"] else None) == first_unstable
        assert int(row["points_probed"]) == len(points)
        if last_stable and first_unstable:
            assert first_unstable / last_stable <= 2
    report = run_cli(["report", str(sweep)], cli_env)
    assert "boundary of lr" in report.stdout and (sweep / "boundary_search.png").exists()
