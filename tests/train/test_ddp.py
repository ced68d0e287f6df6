"""One run on two processes (torchrun, DDP over gloo on CPU) against the same run on one
process: the same global batch gives the same losses and full-batch gradient norms, and
only rank 0 writes a run folder."""

import re
import subprocess
import sys

import pytest
from conftest import RAN_TO_THE_END, SAFETY_NET_S, TINY, read_scalars, read_summary

from normexp.runs.reading import find_runs

pytestmark = pytest.mark.slow  # two torchrun processes and a reference run

STEPS = 4
ARGS = [*TINY, "batch_size=8", f"steps={STEPS}", "log_every=1", "eval_every=2", "warmup=0",
        "schedule=constant", "lr=3e-3", "log.model_update=false"]


def test_torchrun_two_processes_match_one_process(tmp_path, corpus, cli_env):
    data = ["data=text", f"data.files=[{corpus}]"]
    work = tmp_path / "work"  # the torchrun run picks its own folder: runs/<date>/<time> here
    work.mkdir()
    # start the 2-process run, and meanwhile the 1-process reference (3 single-thread processes)
    ddp = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                            "-m", "normexp.cli", "train", *data, *ARGS], cwd=work, env=cli_env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    one = tmp_path / "one"
    ref = subprocess.run([sys.executable, "-m", "normexp.cli", "train", *data, *ARGS, f"hydra.run.dir={one}"],
                         env=cli_env, capture_output=True, text=True, timeout=SAFETY_NET_S)
    assert ref.returncode == 0, ref.stderr[-3000:]
    try:
        out, err = ddp.communicate(timeout=SAFETY_NET_S)
    finally:
        ddp.kill()
    assert ddp.returncode == 0, err[-3000:]

    # one run folder, written once: rank 1 made no folder of its own and wrote nothing into rank 0's
    (run,) = find_runs(work)
    assert [p.name for p in work.iterdir()] == ["runs"]
    # the same event files, folder by folder, as the one-process run's (the run's own and its HParams sub-run's)
    event_folders = lambda root: sorted(str(p.parent.relative_to(root)) for p in root.rglob("events.out.tfevents.*"))  # noqa: E731
    assert event_folders(run) == event_folders(one) and event_folders(work) == [str(run.relative_to(work) / f)
                                                                                  for f in event_folders(one)]
    assert len(list(work.rglob("summary.json"))) == 1 and len(list(work.rglob("train.log"))) == 1
    assert len(list(work.rglob("*.pt"))) == 1
    assert len(re.findall(r"(completed|stalled) 4 steps", (run / "train.log").read_text())) == 1
    summary = read_summary(run)
    assert summary["status"] in RAN_TO_THE_END and summary["steps_completed"] == STEPS
    assert summary["batch_size"] == 8

    # same global batch, same numbers: the loss is the global mean, the gradients the full batch's
    got, want = read_scalars(run), read_scalars(one)
    assert sorted(got["train/loss"]) == list(range(STEPS))
    for step in range(STEPS):
        assert got["train/loss"][step] == pytest.approx(want["train/loss"][step], abs=1e-4), step
        for tag in ("train/grad_norm", "grad_norm/layer_00", "grad_norm/layer_01", "grad_norm_mlp_out/layer_01"):
            assert got[tag][step] == pytest.approx(want[tag][step], rel=1e-4), (tag, step)
    for step in (2, 4):
        assert got["val/loss"][step] == pytest.approx(want["val/loss"][step], abs=1e-4)
    # and the model really trained, so matching is not matching two constants
    assert want["train/loss"][STEPS - 1] < want["train/loss"][0]
