"""A boundary search's record (normexp/runs/search_record.py, issue 60): written as the search
goes, enough to continue it elsewhere from the record alone, refused in one line when it is
another command's; and the property that makes continuing exact: the search's probes depend on
the outcomes only, not on which runs came back when."""

import json
import random
import shutil

import pytest
from conftest import SAFETY_NET_S, TINY, make_corpus, read_csv, run_cli

from normexp.analysis import boundary
from normexp.config.checks import ConfigError
from normexp.launch import boundary_schedule
from normexp.runs.reading import find_runs
from normexp.runs.search_record import RECORD, SearchRecord

# ------------------------------------------------------------------ the file

BASE = {"layers": 2, "placement.name": "post", "optim.betas": [0.9, 0.95], "steps": 60}


def _start(tmp_path, **header):
    return SearchRecord.start(tmp_path / RECORD, {"key": "lr", "search": {}, "seeds": ["0", "1"],
                                                  "overrides": {"hydra": [], "task": []}, "data_files": [], **header})


def test_a_record_reads_back_what_was_written_and_stores_later_settings_as_differences(tmp_path):
    record = _start(tmp_path)
    post = record.add_setting(BASE)
    pre = record.add_setting({**BASE, "placement.name": "pre", "placement.extra": 1})
    record.add_run(post, "0.001", "0", 1, {"status": "completed", "outcome": "learned", "final_val_loss": 2.5,
                                          "checkpoint": "not kept"})
    record.add_run(pre, "0.01", "1", 2, {"status": "stalled", "outcome": "stuck", "final_val_loss": 3.3})
    record.add_run(pre, "0.1", "0", 1, {"status": "failed", "error": "boom"})  # not an outcome: runs again
    record.add_run(pre, "0.1", "0", 1, None)                                     # a job that returned nothing
    lines = (tmp_path / RECORD).read_text().splitlines()
    assert len(lines) == 5 and json.loads(lines[2]) == {"setting": 1, "differs": {"placement.name": "pre",
                                                                                "placement.extra": 1}, "absent": []}
    again = SearchRecord.read(tmp_path / RECORD)
    assert again.settings == [BASE, {**BASE, "placement.name": "pre", "placement.extra": 1}]
    assert again.get(0, "0.001", "0") == {"status": "completed", "outcome": "learned", "final_val_loss": 2.5}
    assert again.get(1, "0.01", "1", 2)["outcome"] == "stuck" and again.get(1, "0.01", "1") is None
    assert again.get(1, "0.1", "0") is None and again.get(None, "0.001", "0") is None
    assert again.setting_of({**BASE, "placement.name": "pre", "placement.extra": 1}) == 1
    assert again.setting_of({**BASE, "layers": 4}) is None
    # a key one side does not know (added by a newer normexp) is no difference
    assert again.setting_of({**BASE, "log.new_signal": False}) == 0


def test_a_line_cut_short_by_a_kill_is_dropped_and_the_record_goes_on(tmp_path):
    record = _start(tmp_path)
    sid = record.add_setting(BASE)
    record.add_run(sid, "0.001", "0", 1, {"status": "completed", "outcome": "learned"})
    with open(tmp_path / RECORD, "a") as f:
        f.write('{"run": 0, "x": "0.01", "seed": "0", "steps_fa')  # killed mid-write
    again = SearchRecord.read(tmp_path / RECORD)
    assert list(again.runs) == [(0, "0.001", "0", 1)]
    again.continue_writing()
    again.add_run(0, "0.01", "0", 1, {"status": "stalled", "outcome": "stuck"})
    assert set(SearchRecord.read(tmp_path / RECORD).runs) == {(0, "0.001", "0", 1), (0, "0.01", "0", 1)}


def test_a_record_of_another_command_is_refused_in_one_line(tmp_path):
    record = _start(tmp_path, data_files=[{"sha256": "ab", "bytes": 10, "path": "/x"}])
    record.add_setting(BASE)
    data = [{"sha256": "ab", "bytes": 10, "path": "/elsewhere/x"}]  # the same bytes anywhere: the same data
    record.check_command("lr", [BASE, {**BASE, "layers": 4}], data)  # shares a setting: its own
    with pytest.raises(ConfigError, match=r"^hydra.sweeper.key=layers: the search record in .* searched lr"):
        record.check_command("layers", [BASE], data)
    with pytest.raises(ConfigError, match="do not hold the bytes"):
        record.check_command("lr", [BASE], [{"sha256": "cd", "bytes": 10}])
    with pytest.raises(ConfigError) as e:
        record.check_command("lr", [{**BASE, "steps": 800}], data)
    assert str(e.value).startswith("steps=800: differs from every setting of the search record") and "(steps=60)" in str(e.value)
    assert "\n" not in str(e.value)


def test_files_that_are_not_a_record_are_refused_in_one_line(tmp_path):
    (tmp_path / RECORD).write_text('{"something": "else"}\n')
    with pytest.raises(ConfigError, match="does not start with a normexp search record header"):
        SearchRecord.read(tmp_path / RECORD)
    (tmp_path / RECORD).unlink()
    (tmp_path / "elsewhere").write_text("")
    (tmp_path / RECORD).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match="is not a plain file"):
        SearchRecord.read(tmp_path / RECORD)


# ------------------------------------------------- continuing reaches the same probes

def _window(rng):
    """A synthetic setting: too slow below lo, learns up to hi, above it unstable or stuck (seeded per seed)."""
    lo, hi = 10 ** rng.uniform(-4, -2.5), 10 ** rng.uniform(-2.5, -0.5)
    above = rng.choice(["collapsed", "stuck"])

    def outcome(x, seed, factor):
        if x < lo / (2 if factor > 1 else 1):
            return {"status": "stalled", "outcome": "slow"}
        if x <= hi * (1 + 0.3 * int(seed)):
            return {"status": "completed", "outcome": "learned"}
        return {"status": "stalled", "outcome": above}
    return outcome


def _scheduled(windows, seeds, known: dict, order_seed: int):
    """Run the async schedule against `windows`, returning the recorded runs from `known` and
    training the rest; the runs come back in an order shuffled by `order_seed` (slots freeing up
    in any order). Returns {job: summary} of every run and the jobs trained."""
    searches = [boundary.Search((("s", i),), 1e-4, 1e-1, 1.25, False, lower_ratio=2.5, budget_check=2)
                for i in range(len(windows))]
    scheduler = boundary_schedule.Scheduler(searches, seeds, boundary.initial_points(1e-4, 1e-1, 4, False))
    rng, seen, trained = random.Random(order_seed), {}, []
    while not scheduler.done():
        for job in scheduler.ready()[:3]:
            scheduler.start(job)
        job = rng.choice(sorted(scheduler.running, key=str))  # any running one comes back next
        key = (job[0], f"{job[1]:g}", job[2], job[3] if len(job) > 3 else 1)
        if key not in known:
            trained.append(key)
        summary = known.get(key) or windows[job[0]](job[1], job[2], key[3])
        seen[key] = summary
        scheduler.finish(job, summary)
    return seen, trained, [s.row("lr") for s in searches]


def test_a_search_continued_from_any_part_of_its_record_probes_what_it_would_have_and_trains_none_again():
    rng = random.Random(60)
    for trial in range(40):
        windows = [_window(rng) for _ in range(3)]
        full, trained_all, rows = _scheduled(windows, ["0", "1", "2"], {}, order_seed=trial)
        cut = rng.randrange(len(trained_all))  # the record as it stood when the search was stopped
        part = {k: full[k] for k in trained_all[:cut]}
        again, trained, rows_again = _scheduled(windows, ["0", "1", "2"], part, order_seed=1000 + trial)
        assert again == full and rows_again == rows, trial
        assert not set(trained) & set(part) and len(trained) == len(full) - cut, trial


# ------------------------------------------------------------------ end to end

def _search(tmp_path, env, folder, *extra, check=True):
    corpus = tmp_path / "corpus.txt"
    if not corpus.exists():
        make_corpus(corpus)
    args = ["train", "-m", "hydra/sweeper=boundary", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", *TINY,
            "steps=30", "warmup=0", "schedule=constant", "data=text", f"data.files=[{corpus}]", "seed=0,1",
            "placement=post,pre", "hydra.sweeper.lower=1e-3", "hydra.sweeper.upper=10", "hydra.sweeper.ratio=4",
            "hydra.sweeper.initial_points=3", "hydra.sweeper.budget_check=2", f"hydra.sweep.dir={folder}", *extra]
    return run_cli(args, env, timeout=SAFETY_NET_S, check=check)


def _runs(record_path):
    out = {}
    for line in record_path.read_text().splitlines():
        obj = json.loads(line)
        if "run" in obj:
            out[(obj["run"], obj["x"], obj["seed"], obj["steps_factor"])] = obj["summary"]
    return out


def _trained(folder) -> set:
    """(placement, lr, seed, steps) of every run folder under `folder`."""
    from omegaconf import OmegaConf

    out = set()
    for run in find_runs(folder):
        cfg = OmegaConf.load(run / ".hydra" / "config.yaml")
        out.add((cfg.placement.name, f"{cfg.lr:g}", str(cfg.seed), int(cfg.steps)))
    return out


@pytest.mark.slow
def test_a_search_stopped_then_continued_elsewhere_from_its_record_alone(tmp_path, cli_env):
    whole = tmp_path / "whole"
    _search(tmp_path, cli_env, whole)
    record = _runs(whole / RECORD)
    assert len(record) == len(find_runs(whole)) >= 10  # every run of the search is in its record
    header, *lines = (whole / RECORD).read_text().splitlines()
    runs_in_order = [line for line in lines if '"run"' in line]
    stopped_after = len(runs_in_order) // 2
    # the record as it stood when the search was stopped halfway, copied alone to a new machine
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    kept = [header, *(line for line in lines if '"setting"' in line)] + runs_in_order[:stopped_after]
    (elsewhere / RECORD).write_text("\n".join(kept) + "\n")
    shutil.copy(whole / RECORD, tmp_path / "whole_record.jsonl")
    done_before = {k for k in _runs(elsewhere / RECORD)}
    resumed = run_cli(["resume", str(elsewhere)], cli_env, timeout=SAFETY_NET_S)  # the command comes from the record's header
    assert f"({stopped_after} of the runs taken from the search's record, not trained)" in resumed.stderr
    # the same probes and outcomes as uninterrupted, in the same tables
    assert _runs(elsewhere / RECORD).keys() == record.keys()
    for key, summary in _runs(elsewhere / RECORD).items():
        assert (summary["status"], summary["outcome"]) == (record[key]["status"], record[key]["outcome"]), key
    assert read_csv(elsewhere / "boundary.csv") == read_csv(whole / "boundary.csv")
    assert read_csv(elsewhere / "boundary_points.csv") == read_csv(whole / "boundary_points.csv")
    # nothing recorded was trained again: exactly the other half has run folders here
    placements = {}
    for line in kept[1:]:
        obj = json.loads(line)
        if "setting" in obj:
            placements[obj["setting"]] = obj.get("settings", obj.get("differs", {})).get("placement.name")
    recorded = {(placements[s], x, seed, 30 * f) for s, x, seed, f in done_before}
    assert len(recorded) == stopped_after
    assert _trained(elsewhere) == _trained(whole) - recorded
    report = run_cli(["report", str(elsewhere)], cli_env)
    assert (f"{stopped_after} of the {len(record)} finished runs in elsewhere/{RECORD} have no run folder here"
            in report.stdout), report.stdout
    # and the record belongs to its own command only: another budget is refused in one line
    refused = _search(tmp_path, cli_env, elsewhere, "resume=true", "steps=31", check=False)
    assert refused.returncode == 2 and refused.stderr.strip().splitlines()[-1].startswith(
        "normexp: error: steps=31: differs from every setting of the search record"), refused.stderr
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(whole / RECORD, other / RECORD)
    refused = _search(tmp_path, cli_env, other, check=False)  # without resume=true
    assert refused.returncode == 2 and "pass resume=true to continue that search" in refused.stderr


def test_a_piece_of_a_search_stops_starting_runs_at_its_time_and_lets_the_going_ones_finish():
    """hydra.sweeper.max_hours: no run starts after the piece's time; the runs going come back
    and are recorded; the schedule ends unfinished, and the rest continues from the record."""
    windows = [_window(random.Random(7)) for _ in range(2)]
    searches = [boundary.Search((("s", i),), 1e-4, 1e-1, 1.25, False) for i in range(2)]
    scheduler = boundary_schedule.Scheduler(searches, ["0", "1"], boundary.initial_points(1e-4, 1e-1, 4, False))
    now, started, ended = [0.0], [], []

    def launch_one(job):  # every run takes 10 "seconds" on the fake clock, one at a time (inline)
        started.append(now[0])
        now[0] += 10
        ended.append(now[0])
        return windows[job[0]](job[1], job[2], 1)

    schedule = boundary_schedule.run_scheduled(scheduler, launch_one, 1, clock=lambda: now[0], stop_after=35)
    assert schedule["stopped"] and schedule["runs"] == 4 and max(started) < 35 <= max(ended)
    assert sum(s.runs for s in searches) == 4 and not scheduler.done()
    fresh = [boundary.Search((("s", 0),), 1e-4, 1e-1, 1.25, False)]
    whole = boundary_schedule.Scheduler(fresh, ["0"], [1e-4, 1e-1])  # without a limit the same call finishes
    assert not boundary_schedule.run_scheduled(whole, lambda job: windows[0](job[1], job[2], 1), 2)["stopped"]
    assert whole.done() and fresh[0].runs >= 2
    assert boundary.check_settings("lr", 1e-4, 1e-1, 1.25, 4, max_hours=0).startswith("hydra.sweeper.max_hours=0")
    assert "schedule=async" in boundary.check_settings("lr", 1e-4, 1e-1, 1.25, 4, schedule="rounds", max_hours=2)
