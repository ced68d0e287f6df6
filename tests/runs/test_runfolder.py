"""One run per folder, and resume checks on what the files are now (issue 32, items 2-5):
folder claims raced by real processes, default names that cannot collide, a folder with a
run's files but no summary, job folders of a sweep that would collide, data files checked by
their contents as named now, checkpoints that carry their settings, settings compared by
value, symlinked run folders. The end-to-end tests start `normexp train` twice at once."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import RAN_TO_THE_END, SAFETY_NET_S, TINY, make_corpus, read_summary

from normexp.runs import claims, process
from normexp.runs.schema import EXECUTION_SETTINGS
from normexp.runs.claims import CLAIM, FolderTaken, claim_default_folder, claim_folder, run_artefacts
from normexp.runs.reading import find_runs
from normexp.runs.record import changed_data_file, file_identity
from normexp.runs.settings import canonical_value, result_settings

RACE = """
import sys, time
from pathlib import Path
from normexp.runs.claims import FolderTaken, claim_folder
folder, start = Path(sys.argv[1]), float(sys.argv[2])
time.sleep(max(0.0, start - time.time()))  # all racers call at the same moment
try:
    claim_folder(folder, resume=False)
    print("won")
except FolderTaken as e:
    print("lost:", e)
"""


def test_of_processes_racing_for_one_folder_exactly_one_claims_it(tmp_path):
    folder = tmp_path / "run"
    start = time.time() + 2.0  # after every interpreter has started
    racers = [subprocess.Popen([sys.executable, "-c", RACE, str(folder), str(start)], stdout=subprocess.PIPE, text=True)
              for _ in range(4)]
    outputs = [p.communicate(timeout=SAFETY_NET_S)[0].strip() for p in racers]
    assert sorted(o.split(":")[0] for o in outputs) == ["lost", "lost", "lost", "won"], outputs
    winner = racers[[o == "won" for o in outputs].index(True)]
    assert json.loads((folder / CLAIM).read_text())["pid"] == winner.pid
    lost = next(o for o in outputs if o != "won")
    assert "choose another folder (hydra.run.dir=PATH)" in lost and "\n" not in lost


def test_a_default_name_taken_in_the_same_second_gets_a_suffix(tmp_path):
    stamp = tmp_path / "runs" / "2026-11-25" / "01-45-05"
    assert claim_default_folder(stamp, "hydra.run.dir") == stamp
    assert claim_default_folder(stamp, "hydra.run.dir") == stamp.with_name("01-45-05-2")  # claimed: next name
    third = stamp.with_name("01-45-05-3")
    third.mkdir()
    (third / "notes.txt").write_text("someone's file")  # not empty, not ours: skipped as well
    assert claim_default_folder(stamp, "hydra.run.dir") == stamp.with_name("01-45-05-4")
    assert (third / "notes.txt").read_text() == "someone's file" and not (third / CLAIM).exists()


@pytest.mark.parametrize("artefact", ["checkpoints/step_00000002.pt", "events.out.tfevents.1.host.1.0",
                                      "normexp_run.json"])
def test_a_folder_with_a_runs_files_but_no_summary_is_not_empty(tmp_path, artefact):
    run = tmp_path / "run"
    (run / artefact).parent.mkdir(parents=True, exist_ok=True)
    (run / artefact).write_bytes(b"x")
    with pytest.raises(FolderTaken) as e:
        claim_folder(run, resume=False)
    assert "no summary.json" in str(e.value) and "pass resume=true" in str(e.value)
    assert not (run / CLAIM).exists() and (run / artefact).read_bytes() == b"x"
    claim_folder(run, resume=True)  # a resume takes such a folder over
    assert claims.holds_own_claim(run)


def test_a_finished_run_is_refused_to_a_new_run_and_handed_to_a_resume(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / CLAIM).write_text(json.dumps({"pid": 1, "host": "elsewhere", "since": "then", "token": "old"}))
    (run / "summary.json").write_text(json.dumps({"status": "completed"}))
    with pytest.raises(FolderTaken, match="already holds a run \\(status completed\\)"):
        claim_folder(run, resume=False)
    claim_folder(run, resume=True)
    assert json.loads((run / CLAIM).read_text())["pid"] == os.getpid()
    assert sorted(p.name for p in run.iterdir()) == [CLAIM, "summary.json"]  # the old claim is not left aside


def test_a_run_that_failed_before_training_gives_its_folder_to_the_corrected_command(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / CLAIM).write_text(json.dumps({"pid": 1, "host": "elsewhere", "token": "old"}))
    (run / "summary.json").write_text(json.dumps({"status": "failed", "error": "seq_len too long"}))
    claim_folder(run, resume=False)
    assert claims.holds_own_claim(run)


def test_a_resume_is_refused_while_the_claiming_process_trains(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        import socket

        (run / CLAIM).write_text(json.dumps({"pid": live.pid, "host": socket.gethostname(), "token": "t"}))
        (run / "summary.json").write_text(json.dumps({"status": "running", "pid": live.pid}))
        with pytest.raises(FolderTaken, match=f"a run is training into it now \\(claimed by pid {live.pid}"):
            claim_folder(run, resume=True)
    finally:
        live.kill()
        live.wait()
    claim_folder(run, resume=True)  # its process is gone (killed): the resume may continue it
    assert claims.holds_own_claim(run)


def test_run_artefacts_leave_out_what_hydra_writes_for_any_job(tmp_path):
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text("lr: 1\n")
    (tmp_path / "train.log").write_text("")
    assert run_artefacts(tmp_path) == []
    (tmp_path / "summary.json").write_text("{}")
    assert run_artefacts(tmp_path) == ["summary.json"]


# ------------------------------------------------------------------ sweeps' job folders

def _sweep_cfg(*overrides):
    from normexp.config.compose import compose_config

    return compose_config(list(overrides), hydra=True)


def test_a_sweep_over_a_key_left_out_of_folder_names_is_refused(tmp_path):
    from normexp.config.checks import ConfigError
    from normexp.launch.folder_names import check_job_folders

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    jobs = [["data=text", f"data.files=[{a}]", "lr=0.001"], ["data=text", f"data.files=[{b}]", "lr=0.001"]]
    with pytest.raises(ConfigError) as e:
        check_job_folders(_sweep_cfg("data=text"), jobs)
    assert str(e.value).startswith(f"data.files=[{a}],[{b}]: job folder names leave data.files out")
    assert "would share the folder data=text,lr=0.001;" in str(e.value)
    with pytest.raises(ConfigError, match="threads does not change what a run computes"):
        check_job_folders(_sweep_cfg(), [["threads=1", "lr=0.1"], ["threads=2", "lr=0.1"]])
    check_job_folders(_sweep_cfg(), [["lr=0.1", "seed=0"], ["lr=0.1", "seed=1"], ["lr=0.2", "seed=0"]])
    # a subdir of the user's own that gives each job its folder (each job carries the command's overrides)
    numbered = "hydra.sweep.subdir=${hydra.job.num}"
    check_job_folders(_sweep_cfg("data=text", numbered), [[*j, numbered] for j in jobs])


def test_a_sweep_over_one_value_spelled_two_ways_is_refused():
    from normexp.config.checks import ConfigError
    from normexp.launch.folder_names import check_job_folders

    for spellings in (("grad_clip=1", "grad_clip=1.0"), ("lr=1e-3", "lr=0.001"), ("optim.betas=[0.9,1]",
                                                                                  "optim.betas=[0.9,1.0]")):
        key = spellings[0].split("=")[0]
        with pytest.raises(ConfigError) as e:
            check_job_folders(_sweep_cfg(), [[spellings[0], "seed=0"], [spellings[1], "seed=0"]])
        assert str(e.value) == (f"{key}={spellings[0].split('=')[1]},{spellings[1].split('=')[1]}: one value spelled "
                                "two ways, so two jobs of this sweep would be one run twice (in two folders); give each "
                                "value once")
    check_job_folders(_sweep_cfg(), [["grad_clip=1", "seed=0"], ["grad_clip=1.0", "seed=1"]])  # other seeds: fine
    # numbered job folders: a job repeated on purpose (a reproducibility check) is the user's to ask for
    numbered = "hydra.sweep.subdir=${hydra.job.num}"
    check_job_folders(_sweep_cfg(numbered), [["seed=0", numbered], ["seed=1", numbered], ["seed=0", numbered]])


@pytest.mark.parametrize("placing", [["hydra.sweep.subdir=fixed"], ["hydra.sweep.subdir=s${seed}"],
                                     ["hydra.sweep.subdir=fixed", "hydra.job.chdir=true"], ["hydra.sweep.subdir=."],
                                     ["hydra.sweep.subdir=${norm.name}"], ["hydra.sweep.subdir=${hydra:runtime.choices.norm}"]])
def test_a_subdir_of_the_users_own_that_puts_two_jobs_in_one_folder_is_refused(tmp_path, placing):
    """Issue 38, item 3: whatever places the jobs (a fixed subdir, an interpolation of a key the
    sweep does not vary, hydra.job.chdir), two jobs resolving to one folder are refused."""
    from normexp.config.checks import ConfigError
    from normexp.launch.folder_names import check_job_folders

    sweep = f"hydra.sweep.dir={tmp_path / 'sweep'}"
    jobs = [[f"lr={lr}", "norm=rms", "seed=0", sweep, *placing] for lr in ("1e-3", "2e-3")]
    with pytest.raises(ConfigError) as e:
        check_job_folders(_sweep_cfg(sweep, *placing), jobs)
    subdir = placing[0].split("=", 1)[1]
    assert str(e.value).startswith(f"hydra.sweep.subdir={subdir}: the jobs lr=1e-3 and lr=2e-3 would both write into "
                                   f"{tmp_path / 'sweep'}")
    assert "\n" not in str(e.value) and not (tmp_path / "sweep").exists()


def test_each_job_gets_the_folder_hydra_gives_it(tmp_path):
    """The folders job_folders predicts are those Hydra's own composition gives each job (any interpolation)."""
    from omegaconf import OmegaConf

    from normexp.config.compose import compose_config
    from normexp.launch.folder_names import job_folders

    sweep = f"hydra.sweep.dir={tmp_path}/${{norm.name}}"
    subdir = "hydra.sweep.subdir=l${layers}_${hydra.job.override_dirname}_${hydra:job.num}"
    jobs = [[f"norm={n}", f"layers={d}", "seed=0", "experiment=warmup_sensitivity", sweep, subdir]
            for n in ("rms", "layer") for d in (2, 4)]
    predicted = job_folders(_sweep_cfg(sweep, subdir), jobs)
    for num, (job, folder) in enumerate(zip(jobs, predicted)):
        cfg = compose_config(job, hydra=True)  # the whole job, composed as Hydra composes it
        name = job[0].split("=")[1]
        assert cfg.norm.name == name
        dirname = ",".join(sorted(o for o in job if not o.startswith(("hydra.", "experiment"))))
        assert folder == str(tmp_path / name / f"l{job[1].split('=')[1]}_{dirname}_{num}"), folder
        assert OmegaConf.select(cfg, "layers") == int(job[1].split("=")[1])


@pytest.mark.parametrize("seed", range(6))
def test_job_folders_apply_overrides_as_hydras_composition_does(tmp_path, seed):
    """job_folders applies a job's value overrides (`key=v`, `+key=v`, `++key=v`, `~key`) and
    makes its override_dirname without Hydra's private config loader: each job's folder and
    values are those of Hydra's own composition (its public compose API) of the whole job."""
    import os
    import random

    from normexp.config.compose import compose_config
    from normexp.launch.folder_names import job_folders

    rng = random.Random(seed)
    choices = [["layers=3", "layers=5"], ["+extra.note=a", "++extra.note=b"], ["~grad_clip", "grad_clip=0.5"],
               ["++lr=0.01", "lr=0.002"], ["threads=2", "data.files=[x.txt]"], ["norm=rms", "norm=layer"],
               ["placement.alpha=2", "seed=3"]]
    sweep = f"hydra.sweep.dir={tmp_path}"
    jobs = [[rng.choice(c) for c in rng.sample(choices, rng.randint(1, len(choices)))] + [sweep] for _ in range(4)]
    predicted = job_folders(_sweep_cfg(sweep), jobs)
    for job, folder in zip(jobs, predicted):
        try:
            cfg = compose_config(job, hydra=True)
        except Exception:  # noqa: BLE001 - Hydra refuses the job: job_folders leaves it unresolved
            assert folder is None, job
            continue
        assert folder == os.path.abspath(os.path.join(str(tmp_path), cfg.hydra.job.override_dirname)), job


def test_the_pre_flight_of_a_sweep_composes_each_job_once(tmp_path, corpus, monkeypatch, capsys):
    """A job's check and its folder's name read one Hydra composition: a sweep of 6 jobs costs
    4 compositions more than one of 2 (its other compositions, of the command itself, are the
    same for both), and each job number is composed once."""
    import hydra

    from normexp.config.compose import forget_compositions
    from normexp.launch.plan import LaunchPlan
    from normexp.launch.preflight import preflight

    monkeypatch.setenv("NORMEXP_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    real, calls = hydra.compose, []
    monkeypatch.setattr(hydra, "compose", lambda **kw: calls.append(list(kw["overrides"])) or real(**kw))

    def dry_run(seeds):
        forget_compositions()  # as a fresh process: the first dry run's compositions are not reused
        calls.clear()
        with pytest.raises(SystemExit) as e:
            preflight(LaunchPlan.parse(["-m", "data=text", f"data.files=[{corpus}]", "layers=2", "lr=1e-3,2e-3",
                                        f"seed={seeds}", f"hydra.sweep.dir={tmp_path / 's'}", "--cfg", "job"]))
        assert e.value.code == 0, capsys.readouterr().err
        numbers = [o for c in calls for o in c if o.startswith("hydra.job.num=")]
        return len(calls), sorted(numbers)

    three, numbers3 = dry_run("0")
    six, numbers6 = dry_run("0,1,2")
    assert six - three == 4  # 6 jobs against 2: 4 more jobs, one composition each
    assert numbers3 == [f"hydra.job.num={n}" for n in range(2)] and numbers6 == [f"hydra.job.num={n}" for n in range(6)]


def test_a_second_job_of_one_process_into_a_folder_an_earlier_job_trained_in_is_refused(tmp_path):
    """Behind the pre-flight check: a sweep's jobs run in one process (or reused workers), so the
    claim an earlier job made is this process's own; a later job must not train into it too."""
    run = tmp_path / "fixed"
    claims.new_launch()
    assert claim_folder(run, resume=False, key="hydra.sweep.dir", job=True) is None
    with pytest.raises(FolderTaken, match=f"hydra.sweep.dir={run}: another job of this sweep trained into it; "):
        claim_folder(run, resume=False, key="hydra.sweep.dir", job=True)
    claims.new_launch()  # the next command of this process (an in-process resume) may take it
    claim_folder(run, resume=True, key="hydra.sweep.dir", job=True)


def test_every_excluded_key_is_a_path_a_preset_or_an_execution_setting():
    """What job folder names leave out must not change a run's result, or be refused as a
    sweep axis by check_job_folders (which refuses any collision, whatever the key)."""
    cfg = _sweep_cfg()
    excluded = set(cfg.hydra.job.config.override_dirname.exclude_keys)
    assert excluded - set(EXECUTION_SETTINGS) == {"experiment", "data.files", "data.val_files"}


# ------------------------------------------------------------------ contents, not paths

def test_a_data_file_is_checked_by_its_contents_as_named_now(tmp_path, monkeypatch):
    first = make_corpus(tmp_path / "a.txt", 4000)
    recorded = [file_identity(first)]
    monkeypatch.chdir(tmp_path)
    assert changed_data_file(recorded, ["a.txt"]) is None
    assert changed_data_file(recorded, [str(first)]) is None

    other = tmp_path / "other"
    other.mkdir()
    make_corpus(other / "a.txt", 4000, seed=1)
    monkeypatch.chdir(other)  # the same relative name, resolved from another folder
    given, why = changed_data_file(recorded, ["a.txt"])
    assert given == "a.txt" and f"it is {other / 'a.txt'} now, was {first}" in why

    link = tmp_path / "link.txt"
    link.symlink_to(first)
    assert changed_data_file(recorded, [str(link)]) is None  # a link to the same text is the same data
    link.unlink()
    link.symlink_to(other / "a.txt")  # retargeted
    assert changed_data_file(recorded, [str(link)])[1].startswith("does not hold the text the run began on")

    st = first.stat()  # an in-place edit that keeps size and mtime
    first.write_text(first.read_text().replace("the", "zzz"))
    os.utime(first, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert first.stat().st_size == st.st_size and first.stat().st_mtime_ns == st.st_mtime_ns
    assert changed_data_file(recorded, [str(first)]) is not None
    assert "names 2 files, the run began on 1" in changed_data_file(recorded, [str(first), str(first)])[1]


def test_a_checkpoint_of_other_settings_is_refused(tmp_path):
    from normexp.runs.checkpoint import check_settings
    from normexp.config.checks import ConfigError

    mine = result_settings(_sweep_cfg("lr=0.002"))
    check_settings({"settings": mine}, mine, "step_00000002.pt", tmp_path)
    other = result_settings(_sweep_cfg("lr=1e-3"))
    with pytest.raises(ConfigError) as e:
        check_settings({"settings": other}, mine, "step_00000002.pt", tmp_path)
    assert str(e.value).startswith(f"lr=0.002: differs from the checkpoint step_00000002.pt in {tmp_path} (lr=0.001)")
    # run settings may differ (threads), and so may spellings of one value
    assert result_settings(_sweep_cfg("lr=0.002", "threads=3", "warmup=100.0")) == mine
    # a checkpoint from before checkpoints kept their settings: its summary's hyperparameters
    with pytest.raises(ConfigError, match="layers=6: differs"):
        check_settings({"summary": {"layers": 12, "lr": 0.002, "warmup": 100}}, mine, "step_1.pt", tmp_path)
    check_settings({"summary": {"layers": 6, "lr": 0.002, "warmup": 100}}, mine, "step_1.pt", tmp_path)


def test_an_old_checkpoint_of_another_warmup_is_refused(tmp_path):
    """A checkpoint from before checkpoints kept their settings holds the warmup its run trained
    with in its summary: at most `steps` (a longer default warmup warms up over all steps). It is
    compared as run on both sides: another warmup is refused, the same one (however long it was
    given) resumes."""
    from normexp.runs.checkpoint import check_settings
    from normexp.config.checks import ConfigError

    mine = result_settings(_sweep_cfg())  # steps=600, warmup=100
    with pytest.raises(ConfigError) as e:
        check_settings({"summary": {"layers": 6, "warmup": 600}}, mine, "step_1.pt", tmp_path)
    assert str(e.value).startswith(f"warmup=100: differs from the checkpoint step_1.pt in {tmp_path} (warmup=600)")
    short = result_settings(_sweep_cfg("steps=40"))  # the default warmup 100 trains as 40
    check_settings({"summary": {"steps": 40, "warmup": 40}}, short, "step_1.pt", tmp_path)
    check_settings({"summary": {"steps": 40, "warmup": 100}}, short, "step_1.pt", tmp_path)  # a summary that kept 100
    with pytest.raises(ConfigError, match="^warmup=40: differs"):
        check_settings({"summary": {"steps": 40, "warmup": 30}}, short, "step_1.pt", tmp_path)


@pytest.mark.parametrize("a,b,same", [(1, 1.0, True), (2000, 2e3, True), (1e-3, 0.001, True), (0.5, 0.50, True),
                                      (True, 1, False), (None, 0, False), ([0.9, 1], (0.9, 1.0), True),
                                      ({"b": 1.0, "a": 2}, {"a": 2.0, "b": 1}, True), ("1", 1, False)])
def test_one_value_has_one_canonical_form(a, b, same):
    assert (canonical_value(a) == canonical_value(b) and repr(canonical_value(a)) == repr(canonical_value(b))) is same


# ------------------------------------------------------------------ symlinked run folders

def test_symlinked_run_folders_are_found_once_and_cycles_end(tmp_path):
    real = tmp_path / "elsewhere" / "run"
    (real / ".hydra").mkdir(parents=True)
    (real / ".hydra" / "config.yaml").write_text("lr: 1\n")
    root = tmp_path / "report"
    (root / "own" / ".hydra").mkdir(parents=True)
    (root / "own" / ".hydra" / "config.yaml").write_text("lr: 2\n")
    (root / "linked").symlink_to(real)
    (root / "loop").symlink_to(root)  # a link back up the tree
    assert find_runs(root) == [root / "linked", root / "own"]


# ------------------------------------------------------------------ through the command line

BASE = [*TINY, "steps=2", "warmup=0", "eval_every=2", "data=text"]


def _start(args, env, cwd):
    return subprocess.Popen([sys.executable, "-m", "normexp.cli", "train", *args], env=env, cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _same_second(commands, env, cwd):
    """Start the commands within one second of the clock, wait, return (returncode, stderr) each."""
    time.sleep(1 - time.time() % 1 + 0.05)  # just after a second begins
    procs = [_start(args, env, cwd) for args in commands]
    return [(p.wait(timeout=SAFETY_NET_S), p.communicate()[1]) for p in procs]


@pytest.mark.slow
def test_two_runs_started_in_the_same_second_keep_both_results(tmp_path, cli_env):
    corpus = make_corpus(tmp_path / "c.txt", 20_000)
    data = f"data.files=[{corpus}]"
    done = _same_second([[*BASE, data, "seed=1"], [*BASE, data, "seed=2"]], cli_env, tmp_path)
    assert [code for code, _ in done] == [0, 0], done
    runs = find_runs(tmp_path / "runs")
    assert len(runs) == 2 and sorted(read_summary(r)["seed"] for r in runs) == [1, 2]
    for run, (_, err) in zip(sorted(runs, key=lambda r: read_summary(r)["seed"]), done):
        assert str(run) in err.strip().splitlines()[-1]

    # an explicit shared folder: one trains, the other is one line, exit 2, nothing of the first touched
    shared = tmp_path / "shared"
    done = _same_second([[*BASE, data, "seed=1", f"hydra.run.dir={shared}"],
                         [*BASE, data, "seed=2", f"hydra.run.dir={shared}"]], cli_env, tmp_path)
    assert sorted(code for code, _ in done) == [0, 2], done
    refused = next(err for code, err in done if code == 2).strip().splitlines()
    assert len(refused) == 1 and refused[0].startswith(f"normexp: error: hydra.run.dir={shared}: ")
    assert "choose another folder (hydra.run.dir=PATH)" in refused[0]
    winner = 1 + [code for code, _ in done].index(0)
    assert read_summary(shared)["seed"] == winner and f"seed: {winner}" in (shared / ".hydra/config.yaml").read_text()

    # the summary removed, checkpoints, events and record kept: not an empty folder
    (shared / "summary.json").unlink()
    before = {p: p.read_bytes() for p in shared.rglob("*") if p.is_file()}
    proc = subprocess.run([sys.executable, "-m", "normexp.cli", "train", *BASE, data, f"hydra.run.dir={shared}"],
                          env=cli_env, capture_output=True, text=True, timeout=SAFETY_NET_S)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"normexp: error: hydra.run.dir={shared}: holds a run's files (normexp_run.json, checkpoints, TensorBoard "
        "events) but no summary.json; pass resume=true to continue it, or choose another folder"]
    assert {p: p.read_bytes() for p in shared.rglob("*") if p.is_file()} == before


def test_a_sweep_whose_subdir_puts_two_jobs_in_one_folder_is_refused_before_any_job_runs(tmp_path, cli_env):
    """Issue 38, item 3, end to end: `hydra.sweep.subdir=fixed` over two seeds ran both jobs into one
    folder (rc 0, one result). Refused now, one line, exit 2, nothing written; a subdir that does
    tell the jobs apart runs each job into the folder the check resolved for it."""
    corpus = make_corpus(tmp_path / "c.txt", 20_000)
    train = [sys.executable, "-m", "normexp.cli", "train", "-m", *BASE, f"data.files=[{corpus}]"]
    sweep = tmp_path / "sweep"
    proc = subprocess.run([*train, "seed=0,1", f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=fixed"], env=cli_env,
                          capture_output=True, text=True, timeout=SAFETY_NET_S)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"normexp: error: hydra.sweep.subdir=fixed: the jobs seed=0 and seed=1 would both write into {sweep}/fixed; give "
        "each job a folder of its own (the default ${hydra.job.override_dirname} names each by its overrides)"]
    assert not sweep.exists()
    proc = subprocess.run([*train, "seed=0,1", f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=s${seed}"], env=cli_env,
                          capture_output=True, text=True, timeout=SAFETY_NET_S)
    assert proc.returncode == 0, proc.stderr
    assert {r.name: read_summary(r)["seed"] for r in find_runs(sweep)} == {"s0": 0, "s1": 1}


@pytest.mark.parametrize("written", [["normexp_run.json"], ["normexp_run.json", "summary.json"]])
def test_what_a_run_started_in_the_same_second_wrote_does_not_refuse_the_next(tmp_path, written):
    """The same-second race, made deterministic: the pre-flight of a second run reads the default
    (time-stamped) folder a first run started in that second has claimed and begun writing. It
    must not refuse (the launch gives the second run <time>-2); before, it said "holds a run's
    files ... but no summary.json" or "already holds a run (status running)"."""
    import socket

    from normexp.config.compose import compose_config
    from normexp.runs.resume import check_output_folder

    stamp = tmp_path / "runs" / "2026-11-25" / "10-00-00"
    stamp.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (stamp / CLAIM).write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname(), "token": "first"}))
        for name in written:
            (stamp / name).write_text(json.dumps({"status": "running", "config": "lr: 1\n"}))
        cfg = compose_config([f"hydra.run.dir={stamp}"], hydra=True)  # as if ${now:...} had resolved to it
        assert check_output_folder(cfg, False, explicit=set()) is None
        assert claim_default_folder(stamp, "hydra.run.dir") == stamp.with_name("10-00-00-2")
        with pytest.raises(Exception, match="pass resume=true|training into it now"):  # named by the user: refused
            check_output_folder(cfg, False, explicit={"hydra.run.dir"})
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("written", [["normexp_run.json"], ["normexp_run.json", "summary.json"]])
def test_a_folder_another_process_is_starting_in_is_refused_by_its_claim(tmp_path, cli_env, written):
    """What a run writes in its first seconds (its record, then a summary saying running) must
    not decide the message a second run into the same folder gets: the live claim does. Seen
    under load as "holds a run's files ... but no summary.json" in the same-second test above."""
    import socket

    shared = tmp_path / "shared"
    shared.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (shared / CLAIM).write_text(json.dumps({"pid": holder.pid, "host": socket.gethostname(),
                                                "since": "2026-11-25 10:00:00", "token": "other"}))
        for name in written:
            (shared / name).write_text(json.dumps({"status": "running"}))
        before = {p: p.read_bytes() for p in shared.rglob("*") if p.is_file()}
        corpus = make_corpus(tmp_path / "c.txt", 20_000)
        proc = subprocess.run([sys.executable, "-m", "normexp.cli", "train", *BASE, f"data.files=[{corpus}]",
                               f"hydra.run.dir={shared}"], env=cli_env, capture_output=True, text=True, timeout=SAFETY_NET_S)
    finally:
        holder.kill()
        holder.wait()
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"normexp: error: hydra.run.dir={shared}: a run is training into it now "
                               f"(claimed by pid {holder.pid} on {socket.gethostname()}")
    assert lines[0].endswith("or choose another folder (hydra.run.dir=PATH)")
    assert {p: p.read_bytes() for p in shared.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_two_sweeps_into_one_folder_keep_both_results(tmp_path, cli_env):
    corpus = make_corpus(tmp_path / "c.txt", 20_000)
    data = f"data.files=[{corpus}]"
    # default folders, started in one second: two sweep folders
    done = _same_second([["-m", *BASE, data, "seed=1,2"], ["-m", *BASE, data, "seed=1,2", "lr=1e-3"]], cli_env,
                        tmp_path)
    assert [code for code, _ in done] == [0, 0], done
    sweeps = sorted({r.parent for r in find_runs(tmp_path / "runs" / "multirun")})
    assert len(sweeps) == 2 and sorted(len(find_runs(s)) for s in sweeps) == [2, 2]
    assert sorted(read_summary(r)["lr"] for r in find_runs(tmp_path / "runs")) == [1e-3, 1e-3, 2e-3, 2e-3]

    # one named folder, two sweeps adding their jobs (resume=true): while one writes into it the
    # other is refused in one line (they would count each other's jobs and overwrite multirun.yaml);
    # started again once the first has ended, it adds its jobs: all four results kept
    sweep = tmp_path / "sweep"
    commands = [["-m", *BASE, data, "seed=1,2", "resume=true", f"hydra.sweep.dir={sweep}"],
                ["-m", *BASE, data, "seed=1,2", "lr=1e-3", "resume=true", f"hydra.sweep.dir={sweep}"]]
    done = _same_second(commands, cli_env, tmp_path)
    assert sorted(code for code, _ in done) in ([0, 0], [0, 2]), done  # [0, 0]: the first ended before the second began
    for command, (code, err) in zip(commands, done):
        if code == 2:
            lines = err.strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith(
                f"normexp: error: hydra.sweep.dir={sweep}: another sweep writes into it now"), err
            assert _same_second([command], cli_env, tmp_path)[0][0] == 0
    assert sorted((s["lr"], s["seed"]) for s in map(read_summary, find_runs(sweep))) == [
        (1e-3, 1), (1e-3, 2), (2e-3, 1), (2e-3, 2)]

    # a new sweep (no resume=true) into it: one line, exit 2, nothing touched
    before = {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()}
    proc = subprocess.run([sys.executable, "-m", "normexp.cli", "train", "-m", *BASE, data, "seed=1,2",
                           f"hydra.sweep.dir={sweep}"], env=cli_env, capture_output=True, text=True, timeout=SAFETY_NET_S)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"normexp: error: hydra.sweep.dir={sweep}: already holds 4 runs; pass resume=true to continue them "
        "(finished jobs are skipped), or choose another folder"]
    assert {p: p.read_bytes() for p in sweep.rglob("*") if p.is_file()} == before


def test_a_claim_left_by_a_process_stopped_at_start_up_does_not_lock_the_folder(tmp_path):
    import socket



    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    run = tmp_path / "run"
    run.mkdir()
    (run / CLAIM).write_text(json.dumps({"pid": gone.pid, "host": socket.gethostname(), "token": "t"}))
    claim_folder(run, resume=False)  # nothing but the claim of a process that is gone: an empty folder
    assert claims.holds_own_claim(run)
    other = tmp_path / "other"
    other.mkdir()
    (other / CLAIM).write_text(json.dumps({"pid": 1, "host": "another-host", "token": "t"}))
    with pytest.raises(FolderTaken, match=f"another run claimed it .*remove {other / CLAIM}\\)$"):
        claim_folder(other, resume=False)


# ------------------------------------------------------------------ claims that survive pid reuse (issue 38, item 5)

def _btime() -> int:
    """The boot time the kernel gives (/proc/stat's btime, seconds since the epoch), read here on its own."""
    return next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines() if line.startswith("btime"))


def _proc_start(pid):
    """The process's start in seconds since the epoch, from /proc on its own: btime plus field 22
    of /proc/<pid>/stat (clock ticks after boot); checked against process.process_start."""
    import os

    stat = Path(f"/proc/{pid}/stat").read_text()
    start = _btime() + int(stat.rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
    assert process.process_start(pid) == pytest.approx(start, abs=0.02)
    return process.process_start(pid)


def _boot():
    assert process.boot_id() == str(_btime())
    return process.boot_id()


def _stranded(run, pid, **identity):
    """A run killed without a word (summary says running) whose claim names `pid`: a live
    process now, but (per `identity`) not the one that claimed the folder."""
    import socket

    record = {"pid": pid, "host": socket.gethostname(), **identity}
    run.mkdir(parents=True, exist_ok=True)
    (run / CLAIM).write_text(json.dumps({**record, "since": "2026-11-24 10:00:00", "token": "before-reboot"}))
    (run / "summary.json").write_text(json.dumps({"status": "running", **record}))


@pytest.mark.parametrize("what", ["pid reused", "rebooted"])
def test_a_claim_whose_pid_now_belongs_to_another_process_is_released_by_a_resume(tmp_path, what):
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        start = _proc_start(live.pid)
        identity = ({"pid_start": start + 1, "boot_id": _boot()} if what == "pid reused"
                    else {"pid_start": start, "boot_id": "another-boot"})
        run = tmp_path / "run"
        _stranded(run, live.pid, **identity)
        with pytest.raises(FolderTaken, match="already holds a run \\(status running\\); pass resume=true"):
            claim_folder(run, resume=False)
        note = claim_folder(run, resume=True)
        assert claims.holds_own_claim(run)
        assert note.startswith(f"hydra.run.dir={run}: released the claim of a run whose process is gone (claimed by "
                               f"pid {live.pid} ") and "\n" not in note
        from normexp.runs.reading import Run

        assert Run(run, "run", {}, [], json.loads((run / "summary.json").read_text())).status == "killed"
        # the same claim with the live process's own start time and boot: it is training, refused
        _stranded(tmp_path / "live", live.pid, pid_start=start, boot_id=_boot())
        with pytest.raises(FolderTaken, match=f"a run is training into it now \\(claimed by pid {live.pid}"):
            claim_folder(tmp_path / "live", resume=True)
    finally:
        live.kill()
        live.wait()


def test_an_old_claim_without_a_start_time_is_judged_by_its_pid_alone(tmp_path):
    """Claims written before start times were kept: a live pid still holds the folder (documented)."""
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _stranded(tmp_path / "run", live.pid)
        with pytest.raises(FolderTaken, match="a run is training into it now"):
            claim_folder(tmp_path / "run", resume=True)
    finally:
        live.kill()
        live.wait()
    assert claim_folder(tmp_path / "run", resume=True).startswith(f"hydra.run.dir={tmp_path / 'run'}: released")


def test_a_claim_records_the_process_start_time_and_boot(tmp_path):
    claim_folder(tmp_path / "run", resume=False)
    claim = json.loads((tmp_path / "run" / CLAIM).read_text())
    assert claim["pid"] == os.getpid() and claim["pid_start"] == _proc_start(os.getpid()) and claim["boot_id"] == _boot()
    assert process.process_alive(claim) is True and process.process_alive({**claim, "pid_start": 1}) is False


def test_resume_continues_a_run_stranded_by_a_reboot_and_report_says_it_is_not_running(tmp_path, cli_env):
    """The CLI end to end: a run whose claim and summary name a live pid (this test's process)
    with another start time, as after a reboot: resume=true says it released the claim (one
    line) and finishes the run; before, `report` shows it killed, not running."""
    corpus = make_corpus(tmp_path / "c.txt", 20_000)
    args = [*BASE, f"data.files=[{corpus}]", "steps=4", "checkpoint_every=2", f"hydra.run.dir={tmp_path / 'run'}"]
    train = [sys.executable, "-m", "normexp.cli", "train"]
    first = subprocess.run([*train, *args], env=cli_env, capture_output=True, text=True, timeout=SAFETY_NET_S)
    assert first.returncode == 0, first.stderr
    # make it look killed after step 2 of 4 by a process that had this test's pid before a reboot
    run = tmp_path / "run"
    final = read_summary(run)["final_val_loss"]
    (run / "checkpoints" / "step_00000004.pt").unlink()
    summary = {**read_summary(run), "status": "running", "steps_completed": 2, "final_val_loss": None,
               "pid": os.getpid(), "pid_start": _proc_start(os.getpid()) + 7, "boot_id": _boot()}
    (run / "summary.json").write_text(json.dumps(summary))
    claim = json.loads((run / CLAIM).read_text())
    (run / CLAIM).write_text(json.dumps({**claim, "pid": os.getpid(), "pid_start": summary["pid_start"]}))
    report = subprocess.run([sys.executable, "-m", "normexp.cli", "report", str(run)], env=cli_env,
                            capture_output=True, text=True, timeout=SAFETY_NET_S)
    assert report.returncode == 0 and "1 killed" in report.stdout and "running" not in report.stdout, report.stdout
    resumed = subprocess.run([*train, *args, "resume=true"], env=cli_env, capture_output=True, text=True, timeout=SAFETY_NET_S)
    assert resumed.returncode == 0, resumed.stderr
    released = [line for line in resumed.stderr.splitlines() if "released the claim" in line]
    assert released == [f"normexp: hydra.run.dir={run}: released the claim of a run whose process is gone (claimed by "
                        f"pid {os.getpid()} on {claim['host']} at {claim['since']}) (killed, or the machine restarted); "
                        "resuming it"], resumed.stderr
    after = read_summary(run)
    assert after["status"] in RAN_TO_THE_END and after["steps_completed"] == 4 and after["pid"] != os.getpid()
    assert after["final_val_loss"] == final  # it trained steps 3 and 4 again from the checkpoint of step 2


# ------------------------------------------------- job folders named by what varies

def _named_folders(sweep_dir, jobs, *cfg_overrides, keep=frozenset()):
    """(the naming override, each job's folder name) as the pre-flight names a sweep's jobs."""
    import os

    from normexp.launch.folder_names import job_folders, name_jobs_by_what_varies

    command = [f"hydra.sweep.dir={sweep_dir}", *cfg_overrides]
    cfg = _sweep_cfg(*command)
    jobs = [[*job, *command] for job in jobs]  # each job carries the command's overrides
    override = name_jobs_by_what_varies(cfg, jobs, keep)
    return override, [os.path.basename(f) for f in job_folders(cfg, jobs)]


def _grid(**axes):
    import itertools

    return [[f"{k}={v}" for k, v in zip(axes, values)] for values in itertools.product(*axes.values())]


def test_job_folders_are_named_by_the_keys_that_vary_only(tmp_path):
    """The README's sweep with two warmups: 6 jobs, named by placement and warmup alone; the
    keys every job shares (layers, d_model, ...) stay in the config, not in the name."""
    jobs = _grid(placement=["pre", "post", "deepnorm"], lr=["1e-2"], warmup=[0, 100], layers=[6], d_model=[64],
                 steps=[200])
    override, names = _named_folders(tmp_path / "s", jobs)
    assert names == [f"placement={p},warmup={w}" for p in ("pre", "post", "deepnorm") for w in (0, 100)]
    assert override.startswith("hydra.job.config.override_dirname.exclude_keys=[")
    for key in ("'lr'", "'layers'", "'d_model'", "'steps'", "'data.files'"):  # the shared ones and the old ones
        assert key in override


def test_a_sweep_of_one_job_or_a_subdir_of_ones_own_keeps_its_names(tmp_path):
    jobs = _grid(placement=["post"], lr=["1e-2"])
    assert _named_folders(tmp_path / "s", jobs) == (None, ["lr=1e-2,placement=post"])
    own = "hydra.sweep.subdir=${hydra.job.num}"
    assert _named_folders(tmp_path / "s", _grid(placement=["pre", "post"], lr=["1e-2"]), own) == (None, ["0", "1"])


def test_keys_the_boundary_sweeper_sets_per_job_stay_in_the_names(tmp_path):
    """The boundary sweeper adds its searched key (and, for budget checks, steps and warmup) to
    each job beyond the grid the pre-flight sees: they must never be left out, or two probes of
    one setting would share a folder (and the second be skipped as finished)."""
    jobs = _grid(placement=["pre", "post"], lr=["1e-3"], steps=[200], layers=[6])
    _, names = _named_folders(tmp_path / "s", jobs, keep={"lr", "seed", "steps", "warmup"})
    assert names == [f"lr=1e-3,placement={p},steps=200" for p in ("pre", "post")]  # layers=6 shared: left out


def test_a_resumed_sweep_named_the_old_way_keeps_its_folders(tmp_path):
    """A sweep run before this rule named each job by all of its overrides: resume=true must
    find those folders (and skip its finished jobs), not start every job again in new ones."""
    jobs = _grid(placement=["pre", "post"], layers=[2])
    sweep = tmp_path / "s"
    for p in ("pre", "post"):
        (sweep / f"layers=2,placement={p}" / ".hydra").mkdir(parents=True)
    assert _named_folders(sweep, jobs, "resume=true") == (None, ["layers=2,placement=pre", "layers=2,placement=post"])
    # resume=true lets sweeps share a folder: one whose own jobs are not there yet keeps full names
    # (two sweeps differing in a shared key only would meet in one folder)
    assert _named_folders(tmp_path / "new", jobs, "resume=true")[0] is None
    short = tmp_path / "short"  # a sweep named by what varies, resumed: its own jobs are found
    (short / "placement=pre" / ".hydra").mkdir(parents=True)
    (short / "placement=pre" / ".hydra" / "overrides.yaml").write_text("- placement=pre\n- layers=2\n")
    override, names = _named_folders(short, jobs, "resume=true")
    assert override is not None and names == ["placement=pre", "placement=post"]
    # a boundary search's jobs carry an lr the pre-flight's job list lacks: told by the shared item
    boundary = tmp_path / "boundary"
    (boundary / "layers=2,lr=0.001,placement=pre,seed=0" / ".hydra").mkdir(parents=True)
    keep = {"lr", "seed", "steps", "warmup"}
    assert _named_folders(boundary, jobs, "resume=true", keep=keep)[0] is None
    assert _named_folders(boundary, jobs, keep=keep)[0] is not None  # (without resume=true it is a new sweep)


def test_a_resumed_boundary_search_named_by_what_varies_finds_its_folders(tmp_path):
    """The deep end's search (issue 60) named its folders without its shared key (layers=2
    here); resumed, the pre-flight's jobs lack the lr its folders carry, so naming them cannot
    find them: the folder's own record of how it was named must (else every finished probe
    is trained again in a new folder with a longer name)."""
    from omegaconf import OmegaConf

    jobs = _grid(placement=["pre", "post"], layers=[2], seed=[0])
    keep = {"lr", "seed", "steps", "warmup"}
    sweep = tmp_path / "boundary"
    override, _ = _named_folders(sweep, jobs, keep=keep)   # the first run's naming: layers left out
    excluded = OmegaConf.from_dotlist([override])
    done = sweep / "lr=0.001,placement=pre,seed=0" / ".hydra"
    done.mkdir(parents=True)
    (done / "overrides.yaml").write_text("- placement=pre\n- layers=2\n- seed=0\n- lr=0.001\n")
    OmegaConf.save(excluded, done / "hydra.yaml")
    override, names = _named_folders(sweep, jobs, "resume=true", keep=keep)
    assert override is not None and names == ["placement=pre,seed=0", "placement=post,seed=0"]
    # the same folder named with every override (an older sweep): resume keeps the long names
    OmegaConf.save(OmegaConf.create({"hydra": {"job": {"config": {"override_dirname": {"exclude_keys": ["resume"]}}}}}),
                   done / "hydra.yaml")
    assert _named_folders(sweep, jobs, "resume=true", keep=keep)[0] is None


def test_a_single_runs_folder_name_holds_its_non_default_overrides():
    from normexp.launch.folder_names import single_run_name

    def name(*overrides):
        return single_run_name(_sweep_cfg(*overrides), list(overrides))

    # placement=pre and seed=0 are the defaults; paths and thread counts never name a run
    assert name("placement=pre", "warmup=0", "layers=12", "seed=0", "threads=1", "data.files=[/x/y.txt]",
                "data=text") == "data=text,layers=12,warmup=0"
    assert name() == "" and name("placement=pre") == ""
    assert name("optim.betas=[0.9, 0.95]") == "optim.betas=_0.9__0.95_"  # no space, bracket or slash in a folder name
    many = [f"+x{i:02d}=1" for i in range(40)]  # 6 characters each: 11 and 10 commas make 76, a 12th 83 > 80
    assert name(*many) == ",".join(many[:11])
