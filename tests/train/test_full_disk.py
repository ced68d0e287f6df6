"""A disk that fills up mid-run: the error names the file that could not be written and says
how to resume (issue 38, item 8). The write fails the way a real full disk fails a plain
write: OSError(ENOSPC) with no file name."""

import subprocess
import sys

from conftest import RAN_TO_THE_END, SAFETY_NET_S, TINY, cli_environment, make_corpus, read_summary

FULL_ON_SECOND = """
import errno, sys
import normexp.runs.checkpoint as ckpt
from normexp.cli import main
real, calls = ckpt.atomic_write_bytes, []
def atomic_write_bytes(path, *a, **kw):
    calls.append(path)
    if len(calls) >= 2:  # the second checkpoint: the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")  # what a plain write raises: no file name
    return real(path, *a, **kw)
ckpt.atomic_write_bytes = atomic_write_bytes
sys.argv = ["normexp", *sys.argv[1:]]
main()
"""


def test_a_full_disk_mid_run_names_the_file_and_how_to_resume(tmp_path):
    corpus = make_corpus(tmp_path / "corpus.txt", n_bytes=20_000)
    env = cli_environment(tmp_path / "cache")
    run = tmp_path / "run"
    args = ["train", *TINY, "steps=6", "warmup=0", "checkpoint_every=2", "keep_checkpoints=5", "data=text",
            f"data.files=[{corpus}]", f"hydra.run.dir={run}"]
    proc = subprocess.run([sys.executable, "-c", FULL_ON_SECOND, *args], env=env, capture_output=True, text=True,
                          timeout=SAFETY_NET_S)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].endswith(f"normexp: error: no space left on the device writing "
                              f"{run / 'checkpoints' / 'step_00000004.pt'}; free some space, then resume=true "
                              "continues the run (the command is on the line above)"), proc.stderr[-3000:]
    assert sum("error" in ln.lower() for ln in lines) == 1, proc.stderr[-3000:]
    assert "its checkpoint of step 2 is kept: free some space, then resume with: " in lines[-2], lines[-2]
    assert "resume=true" in lines[-2] and str(run) in lines[-2], lines[-2]
    summary = read_summary(run)
    assert summary["status"] == "interrupted" and summary["steps_completed"] == 2, summary
    done = subprocess.run([sys.executable, "-m", "normexp.cli", *args, "resume=true"], env=env, capture_output=True,
                          text=True, timeout=SAFETY_NET_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert read_summary(run)["status"] in RAN_TO_THE_END and read_summary(run)["steps_completed"] == 6
