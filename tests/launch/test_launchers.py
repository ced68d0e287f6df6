"""Sweeps through Hydra's launcher plugins, run as a user runs them: joblib (parallel jobs in
reused worker processes) and submitit_local (the SLURM code path without a cluster)."""

import os
import re
from pathlib import Path

import pytest
from conftest import RAN_TO_THE_END, TINY, read_summary, run_cli

from normexp.runs.reading import find_runs

# TINY without its threads=1: these runs pick their thread count themselves (threads=auto)
SMALL = [a for a in TINY if not a.startswith("threads=")] + ["steps=6", "log_every=3", "eval_every=6",
                                                            "eval_batches=1", "warmup=0"]


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def summaries(sweep: Path) -> dict[str, dict]:
    return {run.name: read_summary(run) for run in find_runs(sweep)}


def event_file_pid(run: Path) -> int:
    """TensorBoard names its file events.out.tfevents.<time>.<host>.<pid>.<n>: the writing process."""
    (events,) = run.glob("events.out.tfevents.*")
    return int(events.name.split(".")[-2])


@pytest.mark.slow
def test_joblib_sweep_parallel_jobs_reused_workers(tmp_path, corpus, cli_env):
    """Three jobs on two workers: the third runs in a worker that already ran one. It must get
    cores ÷ 2 threads, the seeds of its own config, and its own log file only."""
    sweep = tmp_path / "sweep"
    run_cli(["train", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "data=text",
             f"data.files=[{corpus}]", *SMALL, "seed=0,1,0", f"hydra.sweep.dir={sweep}",
             "hydra.sweep.subdir=${hydra.job.num}"], cli_env)
    runs = summaries(sweep)
    assert sorted(runs) == ["0", "1", "2"]
    for name, s in runs.items():
        assert s["status"] in RAN_TO_THE_END, (name, s)
        assert s["steps_completed"] == 6
        assert s["threads"] == max(1, cores() // 2), name
    pids = {name: event_file_pid(sweep / name) for name in runs}
    assert len(set(pids.values())) <= 2 and os.getpid() not in pids.values()  # two reused workers
    # job 2 repeats job 0's config in a reused worker: the same numbers, bit for bit;
    # job 1 (another seed) differs, so the equality is not a property of every run
    assert runs["2"]["final_train_loss"] == runs["0"]["final_train_loss"]
    assert runs["2"]["final_val_loss"] == runs["0"]["final_val_loss"]
    assert runs["1"]["final_train_loss"] != runs["0"]["final_train_loss"]
    # logging handlers do not pile up across the jobs of one worker: each log holds its own run
    for name in runs:
        lines = [ln for ln in (sweep / name / "train.log").read_text().splitlines() if re.search(r"(completed|stalled) 6 steps", ln)]
        assert len(lines) == 1 and lines[0].endswith(str(sweep / name)), (name, lines)


@pytest.mark.slow
def test_submitit_local_sweep(tmp_path, corpus, cli_env):
    """submitit_local pickles the job, starts a fresh process per run and collects the result:
    the same path a SLURM sweep takes. cpus_per_task sets each run's thread count."""
    sweep = tmp_path / "sweep"
    run_cli(["train", "-m", "hydra/launcher=submitit_local", "hydra.launcher.cpus_per_task=1",
             "hydra.launcher.timeout_min=5", "data=text", f"data.files=[{corpus}]", *SMALL, "seed=0,1",
             f"hydra.sweep.dir={sweep}"], cli_env)
    runs = summaries(sweep)
    assert len(runs) == 2
    for name, s in runs.items():
        assert s["status"] in RAN_TO_THE_END, (name, s)
        assert s["steps_completed"] == 6 and s["threads"] == 1
    assert sorted(s["seed"] for s in runs.values()) == [0, 1]
    # each run went through submitit: a job folder with its log and pickled result
    assert len(list((sweep / ".submitit").glob("*/*_result.pkl"))) == 2


def test_slurm_launcher_without_slurm_is_one_line_error(tmp_path, corpus, monkeypatch, capsys):
    """The pre-flight refuses a SLURM sweep where there is no SLURM, before any folder exists."""
    from normexp.launch.plan import LaunchPlan
    from normexp.launch.preflight import preflight

    monkeypatch.setenv("PATH", str(tmp_path))  # no srun here, whatever the machine has
    sweep = tmp_path / "sweep"
    with pytest.raises(SystemExit) as exit_info:
        preflight(LaunchPlan.parse(["-m", "hydra/launcher=slurm", "data=text", f"data.files=[{corpus}]", "seed=0,1",
                                    f"hydra.sweep.dir={sweep}"]))
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "srun" in err and "submitit_local" in err, err
    assert not sweep.exists()


def test_example_slurm_config_composes_with_the_plugin():
    """configs/hydra/launcher/slurm.yaml extends the plugin's submitit_slurm: our values on top
    of the plugin's keys, and the result is the plugin's SLURM launcher."""
    import yaml
    from hydra import compose, initialize_config_module

    ours = yaml.safe_load((Path(__file__).parents[2] / "configs/hydra/launcher/slurm.yaml").read_text())
    with initialize_config_module(config_module="normexp.configs", version_base="1.3"):
        cfg = compose(config_name="train", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    for key, value in ours.items():
        if key != "defaults":
            assert launcher[key] == value, key
    assert "signal_delay_s" in launcher and "submitit_folder" in launcher  # the plugin's own keys


@pytest.mark.parametrize("n_jobs", [1, 2, 3, -1, -2])
def test_parallel_jobs_reads_n_jobs_as_joblib_does(n_jobs):
    """threads=auto divides the cores by the jobs joblib really runs at once (joblib's own
    count is the reference: -1 = one per core, -2 = all but one)."""
    import joblib

    from normexp.train.threads import parallel_jobs

    assert parallel_jobs(n_jobs, joblib.cpu_count()) == joblib.effective_n_jobs(n_jobs)
