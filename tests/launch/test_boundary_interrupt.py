"""Ctrl-C of a boundary search whose slots run on joblib workers: every run going saves its
checkpoint and is recorded "interrupted", none is judged, no run starts after the signal, and
the search exits 130 with the line that says how to continue. (Before: the first worker's exit
made joblib abort the pool both slots share, killing the other worker mid-checkpoint: its run
stayed "running" with no checkpoint.)"""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from conftest import SAFETY_NET_S, make_corpus

from normexp.analysis import boundary
from normexp.launch import boundary_schedule


def test_an_interrupted_schedule_starts_nothing_more_and_judges_none_of_the_runs_going():
    searches = [boundary.Search((("s", i),), 1e-4, 1e-1, 1.25, False) for i in range(2)]
    scheduler = boundary_schedule.Scheduler(searches, ["0"], boundary.initial_points(1e-4, 1e-1, 4, False))
    signum, started, both_going, release = [0], [], threading.Barrier(3), threading.Event()

    def launch_one(job):
        started.append(job)
        if len(started) <= 2:
            both_going.wait(timeout=SAFETY_NET_S)
            release.wait(timeout=SAFETY_NET_S)  # the runs going come back after the signal, interrupted
        return {"status": "interrupted"}

    def ctrl_c():
        both_going.wait(timeout=SAFETY_NET_S)
        signum[0] = signal.SIGINT
        release.set()

    threading.Thread(target=ctrl_c).start()
    schedule = boundary_schedule.run_scheduled(scheduler, launch_one, 2, interrupted=lambda: signum[0])
    assert schedule["interrupted"] == signal.SIGINT and schedule["stopped"]
    assert len(started) == 2 and schedule["runs"] == 0  # nothing started after, nothing judged
    assert sum(s.runs for s in searches) == 0 and not scheduler.done()


@pytest.mark.slow
def test_ctrl_c_of_a_boundary_search_on_two_joblib_slots_saves_both_runs_going(tmp_path, cli_env):
    corpus = make_corpus(tmp_path / "corpus.txt")
    sweep = tmp_path / "sweep"
    args = [sys.executable, "-m", "normexp.cli", "train", "-m", "data=text", f"data.files=[{corpus}]",
            "hydra/sweeper=boundary", "hydra.sweeper.key=lr", "hydra.sweeper.lower=1e-3", "hydra.sweeper.upper=1e-1",
            "seed=0", "layers=2", "d_model=32", "heads=2", "seq_len=32", "batch_size=4", "steps=100000",
            "eval_every=100000", "checkpoint_every=0", "log_every=10", "log.progress=lines", "threads=1",
            "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", f"hydra.sweep.dir={sweep}"]
    log = open(tmp_path / "search.log", "w+")
    proc = subprocess.Popen(args, env=cli_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 900  # a safety net only: the runs normally pass step 20 in seconds
        while time.monotonic() < deadline and proc.poll() is None:
            text = (tmp_path / "search.log").read_text()
            if sum(f"#{n} " in line and " step 20 " in line for n in (0, 1) for line in text.splitlines()) >= 2:
                break
            time.sleep(1)
        else:
            pytest.fail(f"the two runs never reached step 20:\n{(tmp_path / 'search.log').read_text()[-3000:]}")
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C at a terminal: the search and its workers
        rc = proc.wait(timeout=SAFETY_NET_S)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    text = (tmp_path / "search.log").read_text()
    assert rc == 130, text[-3000:]
    runs = sorted(p.parent for p in sweep.glob("*/summary.json"))
    assert len(runs) == 2, text[-3000:]
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        assert summary["status"] == "interrupted", (run.name, summary)
        saved = sorted((run / "checkpoints").glob("step_*.pt"))
        assert saved and int(saved[-1].stem.split("_")[1]) == summary["steps_completed"] > 0, (run.name, saved)
    assert f"continue it with normexp resume {sweep}" in text
    assert not (sweep / "boundary.csv").exists()  # the search did not end: no final table from two interrupted runs
