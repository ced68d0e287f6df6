"""Two sweeps with resume=true into one folder at once are refused: the second, while the first
holds the folder's claim, gets one line and exit 2 and writes nothing (before, both ran: each
counted the other's jobs in its progress lines and the later overwrote multirun.yaml). Once the
first has ended, resume=true takes the folder over."""

import subprocess
import sys

from conftest import TINY, make_corpus, read_summary, run_cli

import held_run
from normexp.runs.reading import find_runs


def test_a_second_resumed_sweep_into_a_folder_in_use_is_refused(tmp_path, cli_env):
    corpus = make_corpus(tmp_path / "corpus.txt", 20_000)
    sweep, hold = tmp_path / "sweep", tmp_path / "hold"
    args = ["train", "-m", *TINY, "data=text", f"data.files=[{corpus}]", "seed=0,1", "steps=3", "warmup=0",
            "resume=true", f"hydra.sweep.dir={sweep}"]
    first = subprocess.Popen(held_run.command(hold, 1, args), env=cli_env, text=True,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        held_run.wait_until_held(hold, first)  # the first sweep's first job, held after step 1
        multirun = (sweep / "multirun.yaml").read_bytes()
        second = run_cli(args, cli_env, timeout=held_run.HELD_WITHIN_S, check=False)
        held_run.release(hold)
        _, err = first.communicate(timeout=held_run.HELD_WITHIN_S)
    finally:
        if first.poll() is None:
            first.kill()
    assert second.returncode == 2, second.stderr[-3000:]
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"normexp: error: hydra.sweep.dir={sweep}: another sweep writes "
                                                   "into it now (claimed by pid"), second.stderr
    assert first.returncode == 0, err[-3000:]
    assert (sweep / "multirun.yaml").read_bytes() == multirun  # not rewritten by the refused one
    runs = find_runs(sweep)
    assert len(runs) == 2 and all(read_summary(r)["steps_completed"] == 3 for r in runs)
    # the first has ended: resume=true takes the folder over (both jobs finished: skipped)
    again = run_cli(args, cli_env, timeout=held_run.HELD_WITHIN_S)
    assert again.stderr.count("already finished") == 2, again.stderr[-3000:]
