"""Sweeps through a real SLURM cluster (hydra/launcher=slurm, the shipped config with overrides
for a one-node test cluster): every job runs as a task of a job array, a bad value fails its job
alone, `normexp report` reads the sweep, and a run that SLURM stops (preemption or time limit:
SIGUSR2 from `scancel --signal`) is checkpointed, requeued by submitit and resumed, ending with
the losses of an uninterrupted run.

Marked `slurm`: they run where `sinfo` shows an idle node (`sudo bash scripts/slurm_local.sh
start` makes one) and skip otherwise, except with NORMEXP_REQUIRE_SLURM=1 (CI sets it): then
a missing cluster fails them.
"""

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import RAN_TO_THE_END, SAFETY_NET_S, TINY, make_corpus, read_summary, run_cli, scalar_events

from normexp.runs.reading import find_runs


def cluster_problem() -> str | None:
    if shutil.which("sbatch") is None or shutil.which("sinfo") is None:
        return "no SLURM here (sbatch/sinfo not on PATH); start one with `sudo bash scripts/slurm_local.sh start`"
    try:
        states = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=SAFETY_NET_S).stdout.split()
    except (OSError, subprocess.SubprocessError) as e:
        return f"sinfo does not answer ({e})"
    if not any(s.rstrip("*") in ("idle", "mixed", "allocated") for s in states):
        return f"no SLURM node is up (sinfo: {' '.join(states) or 'nothing'}); see scripts/slurm_local.sh"
    return None


PROBLEM = cluster_problem()
if PROBLEM and os.environ.get("NORMEXP_REQUIRE_SLURM") == "1":
    raise RuntimeError(f"NORMEXP_REQUIRE_SLURM=1 but {PROBLEM}")
pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.skipif(PROBLEM is not None, reason=PROBLEM or "")]

# the shipped hydra/launcher=slurm config, sized for the one-node test cluster
SLURM = ["hydra/launcher=slurm", "hydra.launcher.cpus_per_task=1", "hydra.launcher.gpus_per_node=0",
         "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=10"]


def scontrol_job(job_id: str) -> dict[str, str]:
    """`scontrol show job` as {key: value} (the controller keeps finished jobs for MinJobAge)."""
    out = subprocess.run(["scontrol", "show", "job", job_id], capture_output=True, text=True, timeout=SAFETY_NET_S).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def settled_job(job_id: str, timeout: float = 60) -> dict[str, str]:
    """The job's record once SLURM has seen it end: the sweep returns when the result file is
    written, while the job's process may still be exiting (RUNNING, then COMPLETING)."""
    deadline = time.time() + timeout
    while (job := scontrol_job(job_id)).get("JobState") in ("RUNNING", "COMPLETING") and time.time() < deadline:
        time.sleep(0.5)
    return job


def test_sweep_runs_as_a_job_array_fails_a_bad_job_alone_and_reports(tmp_path, cli_env):
    corpus = make_corpus(tmp_path / "corpus.txt", n_bytes=20_000)
    sweep = tmp_path / "sweep"
    proc = run_cli(["train", "-m", *SLURM, *TINY, "data=text", f"data.files=[{corpus}]", "steps=5", "warmup=0",
                    "placement=pre,post", "lr=2e-3,-1", f"hydra.sweep.dir={sweep}"], cli_env, timeout=SAFETY_NET_S)
    runs = {(s["placement"], s["lr"]): s for s in map(read_summary, find_runs(sweep))}
    assert sorted(runs) == [("post", -1), ("post", 0.002), ("pre", -1), ("pre", 0.002)], proc.stderr[-2000:]
    for placement in ("pre", "post"):
        good, bad = runs[(placement, 0.002)], runs[(placement, -1)]
        assert good["status"] in RAN_TO_THE_END and good["steps_completed"] == 5, good
        assert bad["status"] == "failed" and bad["error"] == "lr=-1: must be a finite number > 0", bad

    # every run was a task of one SLURM job array, and SLURM saw each task end
    tasks = sorted(p.name for p in (sweep / ".submitit").iterdir() if re.fullmatch(r"\d+_\d+", p.name))
    assert len(tasks) == 4 and len({t.split("_")[0] for t in tasks}) == 1, tasks
    for task in tasks:
        assert settled_job(task).get("JobState") == "COMPLETED", task  # a failed run is a job that ended cleanly

    report = run_cli(["report", str(sweep)], cli_env)
    assert "4 runs under" in report.stdout and "lr=-1: must be a finite number > 0" in report.stdout
    assert (sweep / "runs.csv").exists() and (sweep / "report.md").exists()


# long enough to be signalled mid-run (~20-40 s on one core), logging every 100 steps
LONG = [*TINY, "batch_size=8", "seq_len=64", "steps=1500", "warmup=100", "log_every=100", "eval_every=500",
        "checkpoint_every=100", "placement=post"]


def wait_for(predicate, what: str, timeout: float, proc: subprocess.Popen):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        assert proc.poll() is None, f"the sweep ended while waiting for {what}: {proc.communicate()[1][-3000:]}"
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_preempted_run_is_requeued_and_resumes_to_the_losses_of_an_uninterrupted_run(tmp_path, cli_env):
    corpus = make_corpus(tmp_path / "corpus.txt", n_bytes=100_000)
    data = ["data=text", f"data.files=[{corpus}]"]
    sweep = tmp_path / "sweep"
    proc = subprocess.Popen([sys.executable, "-m", "normexp.cli", "train", "-m", *SLURM, *data, *LONG,
                             "hydra.launcher.max_num_timeout=2", f"hydra.sweep.dir={sweep}"],
                            env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    reference = tmp_path / "reference"  # the same run, uninterrupted, outside SLURM (also one thread)
    ref = subprocess.Popen([sys.executable, "-m", "normexp.cli", "train", *data, *LONG, f"hydra.run.dir={reference}"],
                           env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        log = lambda: next(iter(sweep.glob("*/train.log")), None)  # noqa: E731
        wait_for(lambda: log() and "step 300 " in log().read_text(), "step 300 of the SLURM run", SAFETY_NET_S, proc)
        # one job: a plain job id (an array only for two or more)
        job_id = next(p.name for p in (sweep / ".submitit").iterdir() if re.fullmatch(r"\d+(_\d+)?", p.name))
        # what SLURM sends signal_delay_s before a time limit, and on preemption
        subprocess.run(["scancel", "--signal=USR2", job_id], check=True, timeout=SAFETY_NET_S)
        wait_for(lambda: scontrol_job(job_id).get("JobState") == "PENDING", "the requeued job", SAFETY_NET_S, proc)
        stopped = read_summary(log().parent)
        assert stopped["status"] == "requeued" and stopped["requeues"] == 1
        assert 300 <= stopped["steps_completed"] < 1500, stopped
        # SLURM holds a requeued job for about two minutes (its BeginTime); let it start now
        subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True, timeout=SAFETY_NET_S)
        out, err = proc.communicate(timeout=SAFETY_NET_S)
        ref_out, ref_err = ref.communicate(timeout=SAFETY_NET_S)
    finally:
        for p in (proc, ref):
            if p.poll() is None:
                p.kill()
    assert proc.returncode == 0, err[-3000:]
    assert ref.returncode == 0, ref_err[-3000:]

    (run,) = find_runs(sweep)
    summary = read_summary(run)
    # 1500 steps learn (val loss ~0.6 against a ~2.9 unigram baseline): "stalled" would be a bug
    assert summary["status"] == "completed" and summary["steps_completed"] == 1500
    assert summary["requeues"] == 1
    # SLURM's and submitit's record of the stop and the restart
    job = settled_job(job_id)
    assert job.get("Restarts") == "1" and job.get("JobState") == "COMPLETED", job
    job_log = "".join(p.read_text() for p in (sweep / ".submitit" / job_id).glob("*_log.*"))
    assert f"Requeued job {job_id}" in job_log and "Job completed successfully" in job_log
    train_log = (run / "train.log").read_text()
    stop_step = stopped["steps_completed"]
    assert f"preempted by SIGUSR2 at step {stop_step}" in train_log and f"resumed from step {stop_step}" in train_log

    # the resumed run's curves equal the uninterrupted run's bit for bit (one thread, one machine),
    # though it stopped after three periodic checkpoints (steps 100-300) and resumed from the fourth
    got, want = scalar_events(run), scalar_events(reference)
    for tag in ("train/loss", "val/loss", "train/grad_norm"):
        assert got[tag] == want[tag], f"{tag} (stopped at {stop_step})"
    assert summary["final_val_loss"] == read_summary(reference)["final_val_loss"]
