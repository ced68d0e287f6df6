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


# the states of a SLURM job that has ended (a requeued one goes back to PENDING instead)
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE")


def wait_for_requeue(job_id: str, proc: subprocess.Popen) -> None:
    """Until SLURM holds the job PENDING again; a job that ended instead fails at once (without
    accounting, submitit would wait for its result for ever)."""
    state = wait_for(lambda: (s := scontrol_job(job_id).get("JobState")) in ("PENDING", *ENDED) and s,
                     "the requeued job", SAFETY_NET_S, proc)
    assert state == "PENDING", f"job {job_id} ended ({state}) instead of being requeued"


def start_now_and_finish(job_id: str, proc: subprocess.Popen, ref: subprocess.Popen) -> str:
    """Start the requeued job now (SLURM holds one about two minutes, its BeginTime), then wait for
    the sweep and its uninterrupted reference to end, both cleanly; the sweep's stderr."""
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], check=True, timeout=SAFETY_NET_S)
    _, err = proc.communicate(timeout=SAFETY_NET_S)
    _, ref_err = ref.communicate(timeout=SAFETY_NET_S)
    assert proc.returncode == 0, err[-3000:]
    assert ref.returncode == 0, ref_err[-3000:]
    return err


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
        wait_for_requeue(job_id, proc)
        stopped = read_summary(log().parent)
        assert stopped["status"] == "requeued" and stopped["requeues"] == 1
        assert 300 <= stopped["steps_completed"] < 1500, stopped
        start_now_and_finish(job_id, proc, ref)
    finally:
        for p in (proc, ref):
            if p.poll() is None:
                p.kill()

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


# the shipped hydra/launcher=slurm_packed config, sized for the one-node test cluster: packs of 3
SLURM_PACKED = ["hydra/launcher=slurm_packed", "hydra.launcher.cpus_per_task=1", "hydra.launcher.gpus_per_node=0",
                "hydra.launcher.mem_gb=1", "hydra.launcher.timeout_min=10"]
# tokens/s is the only thing a member logs that depends on where and with whom it ran
NOT_COMPARED = {"perf/tokens_per_second"}


def assert_members_equal_solo_runs(sweep: Path, solo: Path, names: list[str]) -> None:
    """Each member's curves and final losses equal its solo run's (the same folder name under `solo`)."""
    for name in names:
        got, want = scalar_events(sweep / name), scalar_events(solo / name)
        assert set(got) == set(want), name
        differ = [t for t in got if t not in NOT_COMPARED and got[t] != want[t]]
        assert not differ, f"{name}: {len(differ)} tags differ from its solo run, e.g. {differ[:4]}"
        a, b = read_summary(sweep / name), read_summary(solo / name)
        assert (a["final_val_loss"], a["final_train_loss"], a["steps_completed"]) == \
               (b["final_val_loss"], b["final_train_loss"], b["steps_completed"]), name


def test_a_packed_sweep_runs_each_pack_as_one_slurm_job_and_each_member_equals_its_solo_run(tmp_path, cli_env):
    corpus = make_corpus(tmp_path / "corpus.txt", n_bytes=20_000)
    common = [*TINY, "data=text", f"data.files=[{corpus}]", "steps=30", "warmup=10", "log_every=5", "eval_every=10",
              "lr=1e-3,2e-3,3e-3", "seed=0,1"]
    sweep, solo = tmp_path / "sweep", tmp_path / "solo"
    proc = run_cli(["train", "-m", *SLURM_PACKED, "hydra.launcher.max_members=3", *common, f"hydra.sweep.dir={sweep}"],
                   cli_env)
    assert "normexp: 6 jobs in 2 packs (3, 3 members)" in proc.stderr, proc.stderr[-3000:]
    run_cli(["train", "-m", *common, f"hydra.sweep.dir={solo}"], cli_env)  # the same six, one after another here

    # two SLURM jobs (the tasks of one array), each a pack of three, each seen ending cleanly
    tasks = sorted(p.name for p in (sweep / ".submitit").iterdir() if re.fullmatch(r"\d+_\d+", p.name))
    assert len(tasks) == 2 and len({t.split("_")[0] for t in tasks}) == 1, tasks
    for task in tasks:
        assert settled_job(task).get("JobState") == "COMPLETED", task
    names = sorted(p.parent.name for p in sweep.glob("*/summary.json"))
    assert names == sorted(p.parent.name for p in solo.glob("*/summary.json")) and len(names) == 6, names
    for name in names:  # every member's folder complete, as a solo run's
        summary = read_summary(sweep / name)
        assert summary["status"] in RAN_TO_THE_END and summary["steps_completed"] == 30, (name, summary["status"])
        assert (sweep / name / ".hydra" / "config.yaml").exists() and (sweep / name / "train.log").exists()
        assert list((sweep / name / "checkpoints").glob("step_*.pt")), name
    assert_members_equal_solo_runs(sweep, solo, names)


def test_a_preempted_pack_is_requeued_and_every_member_resumes_to_its_uninterrupted_run(tmp_path, cli_env):
    """One pack of four: two members that train on, two that diverge at once (lr=100). SLURM's
    warning stops the pack; the requeued job resumes the two from their checkpoints and skips the
    two that had finished."""
    corpus = make_corpus(tmp_path / "corpus.txt", n_bytes=100_000)
    common = ["data=text", f"data.files=[{corpus}]", *LONG, "lr=2e-3,100", "seed=0,1"]
    sweep, solo = tmp_path / "sweep", tmp_path / "solo"
    proc = subprocess.Popen([sys.executable, "-m", "normexp.cli", "train", "-m", *SLURM_PACKED,
                             "hydra.launcher.max_members=4", *common, "hydra.launcher.max_num_timeout=2",
                             f"hydra.sweep.dir={sweep}"], env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    ref = subprocess.Popen([sys.executable, "-m", "normexp.cli", "train", "-m", *common, f"hydra.sweep.dir={solo}"],
                           env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        log = lambda name: sweep / name / "train.log"  # noqa: E731
        named = lambda lr: sorted(p.parent.name for p in sweep.glob(f"*lr={lr},*/train.log"))  # noqa: E731
        wait_for(lambda: len(named("100")) == 2 and len(named("0.002")) == 2
                 and all("step 300 " in log(n).read_text() for n in named("0.002")),
                 "step 300 of both training members", SAFETY_NET_S, proc)
        training, diverging = named("0.002"), named("100")
        job_id = next(p.name for p in (sweep / ".submitit").iterdir() if re.fullmatch(r"\d+(_\d+)?", p.name))
        subprocess.run(["scancel", "--signal=USR2", job_id], check=True, timeout=SAFETY_NET_S)
        wait_for_requeue(job_id, proc)
        stopped = {n: read_summary(sweep / n) for n in training + diverging}
        for name in training:  # every running member checkpointed at the same step boundary
            assert stopped[name]["status"] == "requeued" and stopped[name]["requeues"] == 1, name
            assert 300 <= stopped[name]["steps_completed"] < 1500, (name, stopped[name]["steps_completed"])
        assert stopped[training[0]]["steps_completed"] == stopped[training[1]]["steps_completed"]
        for name in diverging:
            assert stopped[name]["status"] == "diverged", (name, stopped[name]["status"])
        err = start_now_and_finish(job_id, proc, ref)
    finally:
        for p in (proc, ref):
            if p.poll() is None:
                p.kill()
    assert "4 jobs (2 completed, 2 diverged)" in err, err[-3000:]  # none "failed": the finished two were skipped
    job = settled_job(job_id)
    assert job.get("Restarts") == "1" and job.get("JobState") == "COMPLETED", job
    for name in training:
        summary = read_summary(sweep / name)
        assert summary["status"] == "completed" and summary["steps_completed"] == 1500 and summary["requeues"] == 1
        step = stopped[name]["steps_completed"]
        train_log = log(name).read_text()
        assert f"preempted by SIGUSR2 at step {step}" in train_log and f"resumed from step {step}" in train_log
    for name in diverging:
        assert read_summary(sweep / name) == stopped[name], name  # untouched by the requeued job
        assert "already finished (status diverged): skipped" in log(name).read_text(), name
    # each training member stopped after three periodic checkpoints and resumed from the fourth, in
    # a new process on the node: its curves equal its uninterrupted solo run's bit for bit
    assert_members_equal_solo_runs(sweep, solo, training + diverging)
