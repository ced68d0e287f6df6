"""Resuming runs and sweeps through the real command line: a resumed job must continue on the
settings and the data it began on, a refused job is left exactly as it was, a folder a
rejected command left behind takes the corrected command, and a sweep whose every job
failed exits non-zero."""

import json
import shutil
from pathlib import Path

import pytest
from conftest import RAN_TO_THE_END, TINY, cli_environment, make_corpus, read_summary, run_cli

from normexp.runs.reading import find_runs

BASE = [*TINY, "steps=4", "warmup=0", "data=text", "checkpoint_every=2"]


def snapshot(run: Path) -> dict[str, bytes]:
    """The bytes of the files a refused resume must not change."""
    return {name: (run / name).read_bytes() for name in ("summary.json", ".hydra/config.yaml", ".hydra/overrides.yaml")}


def interrupted(run: Path) -> None:
    """Mark a finished run as one stopped after its checkpoint of step 2 (what a SIGKILL
    followed by `job_status.mark_interrupted` leaves), so a resume would have steps left to train."""
    (run / "checkpoints" / "step_00000004.pt").unlink()
    summary = read_summary(run)
    (run / "summary.json").write_text(json.dumps({**summary, "status": "interrupted", "steps_completed": 2}))


@pytest.mark.slow
def test_sweep_resumed_on_other_or_changed_data_is_refused_and_left_as_it_was(tmp_path, cli_env):
    first, other = make_corpus(tmp_path / "first.txt", 20_000), make_corpus(tmp_path / "other.txt", 20_000, seed=1)
    sweep = tmp_path / "sweep"
    run_cli(["train", "-m", *BASE, f"data.files=[{first}]", "seed=0,1", f"hydra.sweep.dir={sweep}"], cli_env)
    runs = find_runs(sweep)
    assert len(runs) == 2
    interrupted(runs[0])
    before = {r: snapshot(r) for r in runs}

    # another corpus: data.files is left out of the folder names, so the same job folders are found
    proc = run_cli(["train", "-m", *BASE, f"data.files=[{other}]", "seed=0,1", "resume=true",
                    f"hydra.sweep.dir={sweep}"], cli_env, check=False)
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert sum(f"data.files=[{other}]: differs from the run in" in e for e in errors) == 2, proc.stderr
    assert errors[-1] == "normexp: error: all 2 jobs of the sweep failed (each job's error is above and in its train.log)"
    assert {r: snapshot(r) for r in runs} == before  # status not "failed", .hydra restored

    # the same path, but the file now holds another text of the same size
    first.write_text(other.read_text())
    proc = run_cli(["train", "-m", *BASE, f"data.files=[{first}]", "seed=0,1", "resume=true",
                    f"hydra.sweep.dir={sweep}"], cli_env, check=False)
    assert proc.returncode == 1 and f"is not the file the run in {runs[0]} began on" in proc.stderr, proc.stderr
    assert {r: snapshot(r) for r in runs} == before

    # the corpus it began on: the interrupted job continues from step 2, the finished one is skipped
    make_corpus(first, 20_000)
    proc = run_cli(["train", "-m", *BASE, f"data.files=[{first}]", "seed=0,1", "resume=true",
                    f"hydra.sweep.dir={sweep}"], cli_env)
    assert "resumed from step 2" in proc.stderr
    assert read_summary(runs[0])["steps_completed"] == 4 and read_summary(runs[0])["status"] in RAN_TO_THE_END
    assert snapshot(runs[1]) == before[runs[1]]


@pytest.mark.slow
def test_sweep_in_which_every_job_fails_exits_1(tmp_path, cli_env):
    """seq_len longer than the corpus is found only once the data is loaded, inside each job."""
    corpus = make_corpus(tmp_path / "c.txt", 5_000)
    proc = run_cli(["train", "-m", *BASE, f"data.files=[{corpus}]", "seq_len=10000", "seed=0,1",
                    f"hydra.sweep.dir={tmp_path / 'sweep'}"], cli_env, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == ("normexp: error: all 2 jobs of the sweep failed (each job's "
                                                    "error is above and in its train.log)")
    assert [read_summary(r)["status"] for r in find_runs(tmp_path / "sweep")] == ["failed", "failed"]


@pytest.mark.slow
def test_folder_of_a_run_that_failed_before_training_takes_the_corrected_command(tmp_path, cli_env):
    corpus = make_corpus(tmp_path / "c.txt", 20_000)
    run = tmp_path / "run"
    proc = run_cli(["train", *BASE, f"data.files=[{corpus}]", "seq_len=100000", f"hydra.run.dir={run}"], cli_env,
                   check=False)
    assert proc.returncode == 2 and read_summary(run)["status"] == "failed"
    run_cli(["train", *BASE, f"data.files=[{corpus}]", f"hydra.run.dir={run}"], cli_env)
    summary = read_summary(run)
    assert summary["status"] in RAN_TO_THE_END and summary["seq_len"] == 32 and summary["error"] is None


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One finished BASE run through the real command line, trained once for the tests below;
    each works on its own copy (copytree keeps the files as they are)."""
    root = tmp_path_factory.mktemp("finished")
    corpus = make_corpus(root / "c.txt", 20_000)
    run = root / "run"
    run_cli(["train", *BASE, f"data.files=[{corpus}]", f"hydra.run.dir={run}"], cli_environment(root / "cache"))
    return corpus, run


def copy_of(finished, tmp_path) -> tuple[Path, Path]:
    """(the corpus, this test's own copy of the finished run)."""
    corpus, run = finished
    shutil.copytree(run, tmp_path / "run")
    return corpus, tmp_path / "run"


@pytest.mark.slow
def test_resume_of_a_run_without_a_checkpoint_says_it_starts_at_step_0(tmp_path, cli_env, finished):
    corpus, run = copy_of(finished, tmp_path)
    for f in (run / "checkpoints").glob("*.pt"):  # as if stopped before its first checkpoint
        f.unlink()
    (run / "summary.json").write_text(json.dumps({**read_summary(run), "status": "interrupted", "steps_completed": 0}))
    proc = run_cli(["train", *BASE, f"data.files=[{corpus}]", "resume=true", f"hydra.run.dir={run}"], cli_env)
    assert f"resume=true but {run} holds no checkpoint yet (status interrupted): training starts again from step 0" \
        in proc.stderr
    assert read_summary(run)["steps_completed"] == 4


@pytest.mark.slow
def test_resume_of_a_run_whose_hydra_config_is_gone(tmp_path, cli_env, finished):
    """normexp's own record stands in for a deleted .hydra/config.yaml; with neither, one line."""
    corpus, run = copy_of(finished, tmp_path)
    interrupted(run)
    (run / ".hydra" / "config.yaml").unlink()
    proc = run_cli(["train", *BASE, f"data.files=[{corpus}]", "layers=3", "resume=true", f"hydra.run.dir={run}"],
                   cli_env, check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"normexp: error: layers=3: differs from the run in {run} (layers=2); resume with the run's own "
        "settings, or train in a new folder"]
    (run / "normexp_run.json").unlink()
    proc = run_cli(["train", *BASE, f"data.files=[{corpus}]", "resume=true", f"hydra.run.dir={run}"], cli_env,
                   check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"normexp: error: hydra.run.dir={run}: the run's settings")


@pytest.mark.slow
def test_flags_after_the_overrides(tmp_path, cli_env):
    corpus = make_corpus(tmp_path / "c.txt", 20_000)
    shown = run_cli(["train", *BASE, f"data.files=[{corpus}]", "layers=3", "--cfg", "job"], cli_env)
    assert "layers: 3" in shown.stdout
    run_cli(["train", *BASE, f"data.files=[{corpus}]", "seed=0,1", f"hydra.sweep.dir={tmp_path / 's'}", "-m"], cli_env)
    assert sorted(read_summary(r)["seed"] for r in find_runs(tmp_path / "s")) == [0, 1]


def test_resume_command_names_absolute_folders(tmp_path, monkeypatch):
    from normexp.runs.checkpoint import resume_command

    monkeypatch.chdir(tmp_path)
    assert resume_command(Path("runs/a")).endswith(f"resume=true hydra.run.dir={tmp_path / 'runs' / 'a'}")


@pytest.mark.slow
def test_resume_checks_the_data_as_named_now_and_the_checkpoints_own_settings(tmp_path, cli_env):
    """A relative data.files resolved from another working folder names other text; a
    checkpoint copied in from a run of another lr: both refused in one line, exit 2, the
    folder as it was. From the first folder, on its own checkpoint, the run continues."""
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir(), there.mkdir()
    make_corpus(here / "c.txt", 20_000)
    make_corpus(there / "c.txt", 20_000, seed=1)  # same name, same size, other text
    run, other = tmp_path / "run", tmp_path / "other"
    run_cli(["train", *BASE, "data.files=[c.txt]", f"hydra.run.dir={run}"], cli_env, cwd=here)
    run_cli(["train", *BASE, "data.files=[c.txt]", "lr=1e-3", f"hydra.run.dir={other}"], cli_env, cwd=here)
    interrupted(run)
    before = snapshot(run)

    proc = run_cli(["train", *BASE, "data.files=[c.txt]", "resume=true", f"hydra.run.dir={run}"], cli_env,
                   check=False, cwd=there)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"normexp: error: data.files=c.txt: does not hold the text the run began on (it is {there / 'c.txt'} now, "
        f"was {here / 'c.txt'}): it is not the file the run in {run} began on; resume on the same data, or train "
        "in a new folder"]
    assert snapshot(run) == before

    own = (run / "checkpoints" / "step_00000002.pt").read_bytes()
    (run / "checkpoints" / "step_00000002.pt").write_bytes((other / "checkpoints" / "step_00000002.pt").read_bytes())
    proc = run_cli(["train", *BASE, "data.files=[c.txt]", "resume=true", f"hydra.run.dir={run}"], cli_env,
                   check=False, cwd=here)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].endswith(
        f"normexp: error: lr=0.002: differs from the checkpoint step_00000002.pt in {run} (lr=0.001): it was trained "
        "with other settings; resume with the checkpoint's own run, or remove that checkpoint")
    assert snapshot(run) == before

    (run / "checkpoints" / "step_00000002.pt").write_bytes(own)
    proc = run_cli(["train", *BASE, "data.files=[c.txt]", "resume=true", f"hydra.run.dir={run}"], cli_env, cwd=here)
    assert "resumed from step 2" in proc.stderr and read_summary(run)["steps_completed"] == 4
