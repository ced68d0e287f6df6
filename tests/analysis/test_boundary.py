"""The boundary search (normexp/analysis/boundary.py) by hand on synthetic outcome functions, and the
Hydra sweeper plugin end to end on a tiny model with the joblib launcher, resume included."""

import math
from pathlib import Path

import pytest
from conftest import SAFETY_NET_S, TINY, make_corpus, read_csv, read_summary, run_cli

from normexp.analysis import boundary
from normexp.launch import boundary_schedule
from normexp.runs.reading import find_runs


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
    boundary_schedule.search_all(searches, list(seeds), points, launch)
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


def test_boundary_csv_is_the_setting_then_the_result_columns(tmp_path):
    """boundary.csv's header: the setting's keys, then BoundaryResult's fields in order (the one
    list the report splits the columns by); the row's values are the search's own."""
    (s,), _ = search(threshold(0.01))
    table, _ = boundary.write_tables([s], "lr", tmp_path)
    header = table.read_text().splitlines()[0].split(",")
    assert header == ["placement", *boundary.RESULT_COLUMNS]
    assert boundary.RESULT_COLUMNS[:4] == ("key", "last_stable", "first_unstable", "ratio")
    row = read_csv(table)[0]
    low, high = s.bracket()
    assert (row["key"], float(row["last_stable"]), float(row["first_unstable"])) == ("lr", low, high)
    assert int(row["points_probed"]) == len(s.outcomes) and int(row["runs_used"]) == s.runs


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
    return run_cli(args + ["resume=true"] * resume, env, timeout=SAFETY_NET_S)


def _from_folders(sweep: Path) -> dict:
    """{placement: {lr: {seed: (status, outcome)}}} read from the run folders' own files."""
    from omegaconf import OmegaConf

    out = {}
    for run in find_runs(sweep):
        cfg = OmegaConf.load(run / ".hydra" / "config.yaml")
        summary = read_summary(run)
        out.setdefault(cfg.placement.name, {}).setdefault(cfg.lr, {})[cfg.seed] = (summary["status"], summary["outcome"])
    return out


@pytest.mark.slow
def test_the_sweeper_end_to_end_and_a_resumed_search(tmp_path, cli_env):
    proc = _sweep(tmp_path, cli_env, ratio=4)   # a coarse search, continued below to ×2
    sweep = tmp_path / "sw"
    first = {run: (run / "summary.json").stat().st_mtime_ns for run in find_runs(sweep)}
    assert "boundary of lr" in proc.stderr and "busy fraction" in proc.stderr
    _sweep(tmp_path, cli_env, ratio=2, resume=True)
    runs = find_runs(sweep)
    assert all((r / "summary.json").stat().st_mtime_ns == first[r] for r in first)  # nothing retrained
    assert len(runs) > len(first)
    table = {row["placement"]: row for row in read_csv(sweep / "boundary.csv")}
    assert not any((sweep / f).exists() for f in (boundary.PROGRESS_TABLE, boundary.PROGRESS_POINTS))  # finished
    by_hand = _from_folders(sweep)
    assert set(table) == set(by_hand) == {"post", "pre"}
    for placement, points in by_hand.items():
        stable = {lr: all(st == "completed" for st, _ in seeds.values()) for lr, seeds in points.items()}
        start = min((lr for lr, ok in stable.items() if ok), default=None)
        for lr, seeds in points.items():  # both seeds, or seed 0 alone where it decided the point
            first = seeds[0][1]
            if first in ("collapsed", "diverged"):      # unstable whatever seed 1 does
                assert set(seeds) == {0}, (lr, seeds)
            elif first == "learned" or start is None or lr > start:
                assert set(seeds) == {0, 1}, (lr, seeds)
            else:  # never learned below the window: skipped if a learning point was known by then
                assert set(seeds) in ({0}, {0, 1}), (lr, seeds)
        above = [lr for lr, ok in stable.items() if not ok and (start is None or lr > start)]
        first_unstable = min(above) if above else None
        below = [lr for lr, ok in stable.items() if ok and (first_unstable is None or lr < first_unstable)]
        last_stable = max(below) if below else None
        if start is None:
            first_unstable = min(points)
        row = table[placement]
        assert (float(row["last_stable"]) if row["last_stable"] else None) == last_stable
        assert (float(row["first_unstable"]) if row["first_unstable"] else None) == first_unstable
        assert int(row["points_probed"]) == len(points)
        assert int(row["runs_used"]) + int(row["runs_skipped"]) == 2 * len(points)
        if last_stable and first_unstable:
            assert first_unstable / last_stable <= 2
    schedule = __import__("json").loads((sweep / "boundary_schedule.json").read_text())
    assert schedule["slots"] == 2 and 0 < schedule["busy_fraction"] <= 1
    report = run_cli(["report", str(sweep)], cli_env)
    assert "boundary of lr" in report.stdout and (sweep / "boundary_search.png").exists()


# ------------------------------------------------------------ two edges, the schedule

def window(low, high, above="diverged"):
    """Learns strictly inside (low, high]; below: never gets going; above: `above`."""
    def outcome(x, seed, i):
        if x <= low:
            return {"status": "stalled", "outcome": "never_learned"}
        return {"status": "completed"} if x <= high else {"status": "diverged" if above == "diverged" else "stalled",
                                                          "outcome": above}
    return outcome


def scheduled(outcome, lower=1e-4, upper=1e-1, ratio=1.25, first=4, seeds=(0, 1, 2), settings=1, lower_ratio=None,
              slots=1):
    """The searches run by Scheduler + run_scheduled against `outcome(x, seed, i) -> summary`."""
    searches = [boundary.Search((("placement", i),), lower, upper, ratio, lower_ratio=lower_ratio)
                for i in range(settings)]
    launched = []

    def launch_one(job):
        launched.append(job)
        return outcome(job[1], job[2], job[0])

    scheduler = boundary_schedule.Scheduler(searches, list(seeds), boundary.initial_points(lower, upper, first, False))
    stats = boundary_schedule.run_scheduled(scheduler, launch_one, slots)
    return searches, launched, stats


def as_summary(outcome):
    return lambda x, seed, i: (lambda o: None if o is None else {"status": o})(outcome(x, seed, i))


def test_both_edges_of_the_window_are_bracketed():
    # too slow at or below 3e-4, learns up to 0.02, diverges above: 1e-4 and 1e-1 fail, 1e-3 and 1e-2 learn
    (s,), _, _ = scheduled(window(3e-4, 0.02), lower_ratio=1.25)
    low, high = s.bracket()
    assert low <= 0.02 < high and high / low <= 1.25
    slow, start = s.lower_bracket()
    assert slow <= 3e-4 < start and start / slow <= 1.25
    row = s.row("lr")
    assert row["upper_edge"] == "unstable" and row["upper_why"] == "diverged 1"  # seed 0 decided it alone
    assert row["lower_edge"] == "too slow" and row["lower_why"].startswith("never_learned")
    assert row["verdict"] == f"{low:g} .. {high:g}"


def test_too_slow_everywhere_is_never_a_stability_limit():
    (s,), _, _ = scheduled(window(1.0, 2.0))  # never learns up to the upper bound
    assert s.verdict() == "none" and s.upper_edge() == "nothing learned"
    assert s.next_points() == []     # nothing to bisect: no unstable point to bound a window
    row = s.row("lr")
    assert row["last_stable"] is None and "never_learned 3" in s.why(1e-1)  # every seed ran: no skipping


def test_above_the_window_a_run_that_never_learned_is_stalled_not_unstable():
    (s,), _, _ = scheduled(window(1e-5, 0.02, above="never_learned"))
    assert s.upper_edge() == "stalled" and s.why(s.bracket()[1]) == "never_learned 3"
    (s,), _, _ = scheduled(window(1e-5, 0.02, above="collapsed"))
    assert s.upper_edge() == "unstable" and s.why(s.bracket()[1]) == "collapsed 1"


def test_no_learning_point_searches_between_slow_and_unstable():
    # slow up to 2e-3, unstable from 2.2e-3: the midpoints close in on the gap, and nothing learns
    def outcome(x, seed, i):
        if x <= 2e-3:
            return {"status": "stalled", "outcome": "never_learned"}
        return {"status": "diverged"}
    (s,), _, _ = scheduled(outcome)
    assert s.upper_edge() == "no window" and s.verdict() == "none"
    slow, unstable = s.empty_window()
    assert slow <= 2e-3 < unstable and unstable / slow <= 1.25
    (s,), _, _ = scheduled(lambda x, seed, i: {"status": "diverged"})
    assert s.upper_edge() == "unstable everywhere" and len(s.outcomes) == 4


def test_seed_zero_decides_only_where_the_rule_allows():
    # seed 0 diverges above 0.02: the others are skipped. Seed 0 never learns at or below 3e-4,
    # under points known to learn: skipped too (at 1e-4 the decision waits until the other
    # initial points' seed 0 is in: one slot, equal costs, so 1e-4 comes back first)
    (s,), launched, _ = scheduled(window(3e-4, 0.02))
    runs_at = lambda x: sorted(seed for _, xx, seed in launched if xx == x)  # noqa: E731
    for x in s.outcomes:
        assert runs_at(x) == ([0, 1, 2] if 3e-4 < x <= 0.02 else [0]), x
    failing = [x for x in s.outcomes if not 3e-4 < x <= 0.02]
    assert s.skipped == 2 * len(failing) and s.runs == len(launched)
    # the rounds schedule probes the same points and finds the same brackets, with every seed
    (r,), _ = search(lambda x, seed, i: "completed" if 3e-4 < x <= 0.02 else ("stalled" if x <= 3e-4 else "diverged"))
    assert set(r.outcomes) == set(s.outcomes) and r.bracket() == s.bracket()
    assert r.lower_bracket() == s.lower_bracket() and r.runs == 3 * len(r.outcomes)


def test_a_seed_that_collapses_makes_the_point_unstable_and_others_run_after_a_slow_seed_zero():
    # seed 0 never learns at 0.05, seed 1 collapses there: the point is unstable, seen only because seed 1 ran
    def outcome(x, seed, i):
        if x < 0.05:
            return {"status": "completed"}
        return {"status": "stalled", "outcome": "collapsed" if seed == 1 else "never_learned"}
    (s,), launched, _ = scheduled(outcome, lower=1e-3, upper=0.1, first=2)
    assert s.upper_edge() == "unstable" and "collapsed 1" in s.why(s.bracket()[1])


def test_no_barrier_between_settings_and_the_busy_fraction():
    """Two slots: setting 0's runs take 0.3 s, setting 1's 0.02 s (sleeps). In rounds a slot
    would wait for the slow setting; here the fast one's runs fill the other slot."""
    import time

    searches = [boundary.Search((("layers", d),), 1e-3, 1e-1, 1.25) for d in (64, 4)]
    durations = {0: 0.3, 1: 0.02}
    spans = []

    def launch_one(job):
        i, x, seed = job
        t = time.monotonic()
        time.sleep(durations[i])
        spans.append((i, t, time.monotonic()))
        return {"status": "completed" if x <= 0.02 else "diverged"}

    scheduler = boundary_schedule.Scheduler(searches, [0], boundary.initial_points(1e-3, 1e-1, 3, False),
                                   cost=lambda i, x: searches[i].setting[0][1])
    stats = boundary_schedule.run_scheduled(scheduler, launch_one, slots=2)
    assert min(spans, key=lambda s: s[1])[0] == 0      # the deep setting starts first (largest cost)
    assert all(s.bracket()[1] / s.bracket()[0] <= 1.25 for s in searches)
    assert stats["runs"] == sum(s.runs for s in searches) == len(spans)
    busy = sum(end - start for _, start, end in spans)
    assert stats["busy_seconds"] == pytest.approx(busy, rel=0.1, abs=0.05)
    # busy and wall are kept to 0.01 s, the fraction to 0.001: over a ~1 s sweep the fraction
    # recomputed from the rounded seconds may differ by ~0.005
    assert stats["busy_fraction"] == pytest.approx(stats["busy_seconds"] / (2 * stats["wall_seconds"]), abs=0.01)
    # every fast run started and ended while some slow run was going: no barrier between settings
    slow = [(a, b) for i, a, b in spans if i == 0]
    fast = [(a, b) for i, a, b in spans if i == 1]
    inside = sum(any(a0 <= a and b <= b0 for a0, b0 in slow) for a, b in fast)
    assert inside == len(fast)


def test_a_failed_job_stops_its_search_under_the_async_schedule_too():
    # setting 0's job at 1e-2 fails while its other points' runs are still out (two slots)
    def outcome(x, seed, i):
        if i == 0 and x == 1e-2:
            return None
        return {"status": "completed" if x <= 0.0123 else "diverged"}
    (broken, fine), launched, stats = scheduled(outcome, settings=2, slots=2)
    assert broken.error is not None and broken.verdict().startswith("failed") and broken.upper_edge() == "failed"
    assert not any(i == 0 and x not in (1e-4, 1e-3, 1e-2, 1e-1) for i, x, _ in launched)  # no midpoint after it
    low, high = fine.bracket()
    assert low <= 0.0123 < high and high / low <= 1.25 and stats["runs"] == len(launched)


def test_settings_of_the_schedule_are_checked():
    assert "lower_ratio" in boundary.check_settings("lr", 1e-4, 1e-1, 1.25, 4, lower_ratio=0.5)
    assert "async, rounds" in boundary.check_settings("lr", 1e-4, 1e-1, 1.25, 4, schedule="fast")
    assert "parallel" in boundary.check_settings("lr", 1e-4, 1e-1, 1.25, 4, parallel=0)


# ------------------------------------------- slow -> stuck gaps, gap reasons, the budget check

def curve_window(slow_below, learns_to, steps_factor_learns_to=None):
    """slow (still falling) at or below `slow_below`, learns up to `learns_to`, stuck (the
    plateau) above; with ×N steps it learns up to `steps_factor_learns_to`. Returns
    outcome(x, seed, i, factor) -> summary."""
    def outcome(x, seed, i, factor=1):
        top = steps_factor_learns_to if factor > 1 and steps_factor_learns_to else learns_to
        if x <= slow_below:
            return {"status": "stalled", "outcome": "slow"}
        return {"status": "completed"} if x <= top else {"status": "stalled", "outcome": "stuck"}
    return outcome


def scheduled_n(outcome, budget_check=0, **kw):
    """scheduled(), with budget_check and an outcome that sees the job's steps factor."""
    lower, upper, first, seeds = kw.get("lower", 1e-4), kw.get("upper", 1e-1), kw.get("first", 4), kw.get("seeds", (0, 1, 2))
    s = boundary.Search((("placement", 0),), lower, upper, kw.get("ratio", 1.25), budget_check=budget_check,
                        lower_ratio=kw.get("lower_ratio"))
    launched = []

    def launch_one(job):
        launched.append(job)
        return outcome(job[1], job[2], job[0], *job[3:])

    scheduler = boundary_schedule.Scheduler([s], list(seeds), boundary.initial_points(lower, upper, first, False))
    boundary_schedule.run_scheduled(scheduler, launch_one, 1)
    return s, launched


def test_a_slow_to_stuck_gap_is_bisected_to_the_ratio():
    # slow at or below 3e-4, stuck above, nothing learns: before, no point was unstable, so the
    # search stopped at the 4 initial points ("nothing learned", a ×10 gap never searched)
    s, _ = scheduled_n(curve_window(3e-4, 0))
    slow, high = s.empty_window()
    assert slow <= 3e-4 < high and high / slow <= 1.25
    assert len(s.outcomes) > 4 and s.upper_edge() == "no window"
    row = s.row("lr")
    assert row["no_window_gap"] == f"{slow:g} .. {high:g}" and row["upper_gap_why"] == ""
    assert s.point_class(slow) == "slow" and s.point_class(high) == "stuck"


def test_a_window_hidden_in_a_slow_to_stuck_gap_is_found_and_both_edges_bracketed():
    # learns only in (3e-4, 5e-4]: none of the initial points 1e-4 (slow), 1e-3, 1e-2, 1e-1
    # (stuck) learns; the gap's midpoint 3.16e-4 does, and both edges go to ×1.25
    s, _ = scheduled_n(curve_window(3e-4, 5e-4))
    low, high = s.bracket()
    assert low <= 5e-4 < high and high / low <= 1.25 and s.upper_edge() == "stalled"
    too_slow, start = s.lower_bracket()
    assert too_slow <= 3e-4 < start and start / too_slow <= 1.25 and s.lower_edge() == "too slow"
    assert s.row("lr")["upper_gap_why"] == s.row("lr")["lower_gap_why"] == ""


def test_every_gap_wider_than_its_ratio_is_named():
    # slow everywhere: the window (if any) lies above upper
    s, _ = scheduled_n(curve_window(1.0, 2.0))
    assert s.upper_edge() == "nothing learned" and s.upper_gap_why().startswith("search bound reached")
    # learns everywhere: both edges at the search's bounds
    s, _ = scheduled_n(curve_window(0, 1.0))
    assert s.upper_gap_why() == "search bound reached: learns up to upper"
    assert s.lower_gap_why() == "search bound reached: learns down to lower"
    # a search cut short (the tables are written after every run): "in progress"
    cut = boundary.Search((), 1e-4, 1e-1, 1.25)
    cut.outcomes = {1e-3: {0: "learned"}, 1e-2: {0: "stuck"}}
    assert cut.upper_gap_why() == "in progress" and cut.row("lr")["upper_gap_why"] == "in progress"
    # whole numbers with nothing between
    d = boundary.Search((), 6, 8, 1.1, integer=True)
    d.outcomes = {6: {0: "learned"}, 7: {0: "stuck"}}
    assert d.upper_gap_why() == "no value between"


def test_the_budget_check_reruns_the_failing_edge_point_at_n_times_the_steps():
    # stuck above 0.02 at the base budget, but learns up to 0.05 with ×4 steps
    s, launched = scheduled_n(curve_window(3e-4, 0.02, steps_factor_learns_to=0.05), budget_check=4)
    low, high = s.bracket()
    too_slow, _ = s.lower_bracket()
    checks = [job for job in launched if len(job) == 4]
    # after the search: every seed at both edges' failing points, at ×4, nothing else
    assert sorted(checks) == sorted((0, x, seed, 4) for x in (high, too_slow) for seed in (0, 1, 2))
    assert launched[-len(checks):] == checks and s.budget_runs == 6
    assert s.upper_edge() == "too slow for the budget"       # the "stalled" edge was the budget
    row = s.row("lr")
    assert row["upper_budget"] == f"learns at ×4 steps at {high:g} (learned 3): too slow for the budget"
    assert row["lower_budget"].startswith("fails at ×4")      # 3e-4 and below: still slow at ×4
    assert row["runs_used"] == s.runs and s.runs == len(launched) - 6


def test_an_edge_that_still_fails_with_the_longer_budget_stays_a_limit_and_unstable_edges_are_not_rerun():
    s, launched = scheduled_n(curve_window(3e-4, 0.02), budget_check=4)   # no more at ×4
    assert s.upper_edge() == "stalled" and s.row("lr")["upper_budget"].startswith("fails at ×4")
    # diverging above the window: a stability failure already, not rerun; the lower edge is
    s, launched = scheduled_n(lambda x, seed, i, factor=1: window(3e-4, 0.02)(x, seed, i), budget_check=4)
    assert s.upper_edge() == "unstable" and s.row("lr")["upper_budget"] == "not rerun: unstable"
    assert {job[1] for job in launched if len(job) == 4} == {s.lower_bracket()[0]}


def test_the_budget_check_under_the_rounds_schedule_and_off_by_default(tmp_path):
    outcome = curve_window(3e-4, 0.02, steps_factor_learns_to=0.05)
    s = boundary.Search((("placement", 0),), 1e-4, 1e-1, 1.25, budget_check=3)
    batches = []

    def launch(batch):
        batches.append(batch)
        return [outcome(job[1], job[2], job[0], *job[3:]) for job in batch]

    boundary_schedule.search_all([s], [0, 1], boundary.initial_points(1e-4, 1e-1, 4, False), launch)
    assert all(len(job) == 4 and job[3] == 3 for job in batches[-1])    # the last round is the check
    assert not any(len(job) == 4 for b in batches[:-1] for job in b)
    assert s.upper_edge() == "too slow for the budget"
    _, points = boundary.write_tables([s], "lr", tmp_path)
    rows = [r for r in read_csv(points) if r["steps_factor"] == "3"]
    assert len(rows) == 4 and {r["seed"] for r in rows} == {"0", "1"}
    off, launched = scheduled_n(outcome)
    assert not any(len(job) == 4 for job in launched) and off.row("lr")["upper_budget"] == ""


def test_old_never_learned_summaries_are_read_again_from_their_curve():
    s = boundary.Search((), 1e-4, 1e-1, 1.25)
    flat = {"status": "stalled", "outcome": "never_learned", "baseline_loss": 3.0,
            "loss_trajectory": {"train": [[0, 5.0], [50, 3.1]],
                                "val": [[50, 3.02], [100, 2.99], [150, 3.03], [200, 3.0]]}}
    boundary.record(s, 1e-2, 0, flat)
    boundary.record(s, 1e-3, 0, {"status": "stalled", "outcome": "never_learned"})   # no curve: kept
    assert s.outcomes == {1e-2: {0: "stuck"}, 1e-3: {0: "never_learned"}}
    assert s.point_class(1e-3) == "slow" and s.empty_window() == (1e-3, 1e-2)


def test_budget_check_setting_is_checked():
    assert boundary.check_settings("lr", 1e-4, 1e-1, 1.25, 4, budget_check=4) is None
    assert "budget_check=1" in boundary.check_settings("lr", 1e-4, 1e-1, 1.25, 4, budget_check=1)
    assert "budget_check" in boundary.check_settings("lr", 1e-4, 1e-1, 1.25, 4, budget_check=-2)


def test_budget_check_rows_pair_each_rerun_with_the_seeds_search_outcome():
    import pandas as pd

    from normexp.analysis.boundary import budget_check_rows

    points = pd.DataFrame([
        # lr 0.03: seed 0 stuck in the search, seed 1 never ran there (the point was decided); both rerun at ×4
        {"placement": "post", "lr": 0.03, "seed": 0, "learned": "no", "outcome": "stuck", "steps_factor": 1},
        {"placement": "post", "lr": 0.01, "seed": 0, "learned": "yes", "outcome": "learned", "steps_factor": 1},
        {"placement": "post", "lr": 0.03, "seed": 0, "learned": "yes", "outcome": "learned", "steps_factor": 4},
        {"placement": "post", "lr": 0.03, "seed": 1, "learned": "no", "outcome": "slow", "steps_factor": 4}])
    rows = budget_check_rows(points, ["placement"], "lr")
    assert [(r["lr"], r["seed"], r["outcome at ×1"], r["steps factor"], r["outcome at ×N"]) for r in rows] == \
        [(0.03, 0, "stuck", 4, "learned"), (0.03, 1, "-", 4, "slow")]
    assert budget_check_rows(points.drop(columns="steps_factor"), ["placement"], "lr") == []


def stuck_but_a_narrow_window(low, high):
    """Stuck (flat on the plateau) everywhere except a window (low, high] where every seed learns:
    DeepNorm/xavier at 16 blocks and 200 steps, stuck at 3e-4 and 3e-3, learned at 1.73e-3."""
    def outcome(x, seed, i, factor=1):
        return {"status": "completed"} if low < x <= high else {"status": "stalled", "outcome": "stuck"}
    return outcome


def test_a_window_between_two_stuck_points_is_found():
    # initial points 1e-4, 1e-3, 1e-2, 1e-1 are all stuck; before, the search stopped there
    # ("stuck everywhere", ×10 gaps never searched); now each gap is bisected to the lower
    # ratio, 1.78e-3 learns, and the upper edge goes to ×1.25
    s, _ = scheduled_n(stuck_but_a_narrow_window(1.5e-3, 2.2e-3), ratio=1.25, lower_ratio=2.5)
    low, high = s.bracket()
    assert 1.5e-3 < low <= 2.2e-3 < high and high / low <= 1.25 and s.upper_edge() == "stalled"
    assert s.lower_edge() == "stuck below"


def test_stuck_everywhere_searches_every_gap_to_the_lower_ratio_and_says_so():
    s, _ = scheduled_n(stuck_but_a_narrow_window(0, 0), ratio=1.25, lower_ratio=2.5)
    xs = sorted(s.outcomes)
    assert all(b / a <= 2.5 for a, b in zip(xs, xs[1:])) and len(xs) > 4
    assert s.upper_edge() == "stuck everywhere"
    assert s.upper_gap_why() == "search bound reached: no slow point down to lower; stuck everywhere, each gap searched to ×2.5"


# ------------------------------------------------------------ the tables on disk

def test_a_resumed_search_writes_its_progress_beside_the_finished_tables(tmp_path):
    """A resumed sweep knows only the points it has replayed so far: its progress goes to the
    progress files, so a resume stopped early leaves the finished tables whole (the depth-law
    resume killed seconds in had rewritten boundary.csv with 16 and 32 blocks as "none")."""
    (done,), _ = search(threshold(0.01))
    table, points = boundary.write_tables([done], "lr", tmp_path)
    finished = (table.read_bytes(), points.read_bytes())
    replayed = boundary.Search((("placement", 0),), 1e-4, 1e-1, 1.25, False)  # the resume, one point in
    replayed.outcomes[1e-3] = {0: "learned"}
    boundary.write_tables([replayed], "lr", tmp_path, finished=False)
    assert (table.read_bytes(), points.read_bytes()) == finished
    progress = read_csv(tmp_path / boundary.PROGRESS_POINTS)
    assert [(float(r["lr"]), r["outcome"]) for r in progress] == [(1e-3, "learned")]
    assert boundary.points_file(tmp_path / boundary.PROGRESS_TABLE) == tmp_path / boundary.PROGRESS_POINTS
    boundary.write_tables([done], "lr", tmp_path)  # the resume finished: its tables, no progress left
    assert not (tmp_path / boundary.PROGRESS_TABLE).exists() and not (tmp_path / boundary.PROGRESS_POINTS).exists()
    assert (table.read_bytes(), points.read_bytes()) == finished


def test_the_report_reads_finished_tables_else_progress_and_follows_linked_sweeps(tmp_path):
    """Each sweep folder's boundary.csv, or its progress table where none has finished; found the
    way runs are found, symlinked sweep folders included (a study folder linking its parts)."""
    from normexp.runs.reading import find_files

    (done,), _ = search(threshold(0.01))
    finished, running, elsewhere = tmp_path / "a", tmp_path / "b", tmp_path / "elsewhere" / "c"
    for folder in (finished, running, elsewhere):
        folder.mkdir(parents=True)
    boundary.write_tables([done], "lr", finished)
    boundary.write_tables([done], "lr", finished, finished=False)  # a resume of `a` under way
    boundary.write_tables([done], "lr", running, finished=False)
    boundary.write_tables([done], "lr", elsewhere)
    study = tmp_path / "study"
    study.mkdir()
    for name, target in (("a", finished), ("b", running), ("c", elsewhere)):
        (study / name).symlink_to(target, target_is_directory=True)
    tables, in_progress = boundary.sweep_tables(find_files(study, boundary.TABLE),
                                                find_files(study, boundary.PROGRESS_TABLE))
    assert [t.relative_to(study).as_posix() for t in tables] == ["a/boundary.csv", "b/boundary_progress.csv",
                                                                 "c/boundary.csv"]
    assert [t.parent.name for t in in_progress] == ["b"]


def test_the_boundary_figure_draws_a_sweep_stopped_before_some_settings_were_probed(tmp_path):
    """A sweep stopped at a deadline (the GPU session's deep end) leaves progress tables in which
    some settings have no points yet; the figure drew each setting's green dots with
    `[y] * int(at.sum())`, and an empty setting's sum is '' (object dtype): ValueError."""
    import pandas as pd
    from normexp.analysis.report.figures import plot_boundary_search

    (done,), _ = search(threshold(0.01))
    not_started = boundary.Search((("placement", 1),), 1e-4, 1e-1, 1.25, False)
    boundary.write_tables([done, not_started], "lr", tmp_path, finished=False)
    table = pd.read_csv(tmp_path / boundary.PROGRESS_TABLE)
    points = pd.read_csv(tmp_path / boundary.PROGRESS_POINTS)
    assert len(table) == 2 and set(points["placement"]) == {0}  # the second setting has no points
    plot_boundary_search(table, points, "lr", ["placement"], str, tmp_path / "boundary_search.png")
    drawn = pd.read_csv(tmp_path / "boundary_search.csv")
    assert len(drawn) == len(points)
    assert (tmp_path / "boundary_search.png").stat().st_size > 0


def test_a_sweep_that_held_the_depth_fixed_joins_the_other_sweeps_lines(tmp_path):
    """Two searches reported together: one swept layers=2,4 (a layers column), the other held
    layers=8 (no column: Hydra's sweep varied only placement). Its rows take the depth from its
    multirun.yaml, so the depth law sees 3 depths of one line, not a line of NaN depths."""
    from normexp.analysis.report.registry import ReportError
    from normexp.analysis.report.sections import read_searches

    def searches(depths, limit):
        keys = [(("layers", d), ("placement", "pre")) if d else (("placement", "pre"),) for d in depths]
        out = [boundary.Search(k, 1e-4, 1e-1, 1.25, False) for k in keys]
        for s, d in zip(out, depths):
            boundary_schedule.search_all([s], [0, 1], boundary.initial_points(1e-4, 1e-1, 4, False),
                                         lambda batch: [{"status": "completed" if x < limit else "diverged"}
                                                        for _, x, _ in batch])
        return out

    (tmp_path / "shallow").mkdir()
    (tmp_path / "deep").mkdir()
    shallow, _ = boundary.write_tables(searches([2, 4], 0.01), "lr", tmp_path / "shallow")
    deep, _ = boundary.write_tables(searches([None], 0.005), "lr", tmp_path / "deep")
    assert "layers" not in read_csv(deep)[0]
    (tmp_path / "deep" / "multirun.yaml").write_text("layers: 8\nplacement:\n  name: pre\n  eps: 1.0e-5\n")
    table, points = read_searches([shallow, deep])
    assert sorted(table["layers"].astype(int)) == [2, 4, 8] and set(table["placement"]) == {"pre"}
    assert list(table.columns[:2]) == ["layers", "placement"] and "key" in table.columns
    deep_points = points[points["layers"].astype(int) == 8]
    assert len(deep_points) == len(read_csv(deep.with_name("boundary_points.csv")))
    assert (deep_points["lr"].astype(float)[deep_points["learned"] == "yes"] < 0.005).all()
    (tmp_path / "deep" / "multirun.yaml").unlink()
    with pytest.raises(ReportError, match=r"deep: its boundary.csv has no layers column .*normexp report .*deep\)"):
        read_searches([shallow, deep])
