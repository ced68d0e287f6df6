"""Every stop of a pack records each member: with real signals on a tiny pack held at a step
boundary past its checkpoint, a stop that cannot wait for the loop (a second signal, or a first
one the loop does not reach within the grace) leaves every member "interrupted" at its newest
checkpoint, with the line that resumes it, as a solo run's hard stop does."""

import re
import signal
import subprocess

import pytest
from conftest import TINY, make_corpus, read_summary

import held_run
from normexp.runs.reading import find_runs

HELD_AT = 4  # the pack is held as step 4 begins: checkpoint_every=2 has written steps 2 and 4


@pytest.mark.parametrize("signals", [("SIGTERM", "SIGTERM"), ("SIGINT", "SIGINT"), ("SIGINT",)])
def test_a_pack_stopped_at_once_records_every_member_interrupted_at_its_checkpoint(tmp_path, cli_env, signals):
    corpus = make_corpus(tmp_path / "corpus.txt", 20_000)
    sweep, hold = tmp_path / "sweep", tmp_path / "hold"
    args = ["train", "-m", "hydra/launcher=packed", *TINY, "data=text", f"data.files=[{corpus}]", "seed=0,1",
            "steps=50", "warmup=0", "log_every=1", "checkpoint_every=2",
            f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(held_run.command(hold, f"pack:{HELD_AT}", args), env=cli_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        held_run.wait_until_held(hold, proc)
        for name in signals:  # the held loop never reaches its next check(): only the hard stop ends it
            proc.send_signal(getattr(signal, name))
        _, err = proc.communicate(timeout=held_run.HELD_WITHIN_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + getattr(signal, signals[0]), err[-3000:]
    runs = find_runs(sweep)
    assert len(runs) == 2, runs
    for run in runs:
        newest = max(int(p.stem.split("_")[1]) for p in (run / "checkpoints").glob("step_*.pt"))
        assert newest == HELD_AT
        summary = read_summary(run)
        assert (summary["status"], summary["steps_completed"]) == ("interrupted", HELD_AT), (run, summary)
    stops = [line for line in err.splitlines() if re.search(rf"interrupted by {signals[0]}: stopped at once", line)]
    assert len(stops) == 2, err[-3000:]  # one line per member, each saying how to resume
    assert all(f"the checkpoint of step {HELD_AT} is kept; resume with: normexp resume {sweep}" in line
               for line in stops), stops  # the sweep's folder: its multirun.yaml keeps hydra/launcher=packed
