"""The command line end to end: help, config display, a single run and a full sweep grid."""

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import RAN_TO_THE_END, SAFETY_NET_S, TINY, read_summary, run_cli

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_help_lists_commands_and_config_groups(cli_env):
    top = run_cli(["--help"], cli_env).stdout
    assert "train" in top
    groups = run_cli(["train", "--help"], cli_env).stdout
    # each group lists the yaml files of its folder, sorted: a new variant's yaml shows up by itself
    for group in ("norm", "placement", "init", "schedule", "tokenizer", "experiment"):
        options = sorted(f.stem for f in (CONFIGS / group).glob("*.yaml"))
        assert len(options) >= 2 and f"{group}: {', '.join(options)}" in groups, group
    assert "schedule: constant, cosine, inverse_sqrt, linear" in groups  # and one written out


def test_every_preset_has_a_one_line_description_shown_in_help(cli_env):
    """The convention: the comment line right after `# @package _global_` describes the preset
    in one sentence; `normexp train --help` shows it beside the preset's name."""
    presets = sorted(CONFIGS.glob("experiment/*.yaml"))
    assert len(presets) >= 2
    help_lines = run_cli(["train", "--help"], cli_env).stdout.splitlines()
    for path in presets:
        lines = path.read_text(encoding="utf-8").splitlines()
        assert lines[0] == "# @package _global_", path.name
        assert lines[1].startswith("# ") and lines[2] == "#", f"{path.name}: line 2 is the description, then '#'"
        description = lines[1][2:]
        assert description[-1] in ".?" and len(description) <= 100, (path.name, description)
        shown = [line.split() for line in help_lines if line.split()[:1] == [path.stem]]
        assert [" ".join(words[1:]) for words in shown] == [description], path.name


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_shell_completion_that_hydra_help_advertises_works(tmp_path, cli_env):
    """`eval "$(normexp train -sc install=bash)"` (what `normexp train --hydra-help` says) and then
    TAB in bash: the script asks `normexp -sc query=bash` for the completions of the typed line.
    Run here in a real bash with a `normexp` on PATH, as a user's shell would."""
    import subprocess
    import sys

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "normexp").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m normexp.cli "$@"\n')
    (bin_dir / "normexp").chmod(0o755)
    script = """eval "$(normexp train -sc install=bash)"
complete_line() { COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}; COMP_CWORD=$2; hydra_bash_completion; echo "${COMPREPLY[*]}"; }
complete_line "normexp train placement=de" 2
complete_line "normexp train -m experiment=depth_l" 3
complete_line "normexp tr" 1
complete -p train >/dev/null 2>&1 && echo "train hijacked" || echo "train untouched"
"""
    env = {**cli_env, "PATH": f"{bin_dir}:{cli_env['PATH']}"}
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=SAFETY_NET_S,
                         cwd=tmp_path).stdout.splitlines()
    placements = sorted(p.stem for p in (CONFIGS / "placement").glob("de*.yaml"))
    presets = sorted(p.stem for p in (CONFIGS / "experiment").glob("depth_l*.yaml"))
    assert sorted(out[0].split()) == [f"placement={p}" for p in placements], out
    assert sorted(out[1].split()) == [f"experiment={p}" for p in presets], out
    assert out[2:] == ["train", "train untouched"], out  # the command's name, and no completion for `train`


def test_sweep_dry_run_lists_the_jobs_and_writes_nothing(tmp_path, cli_env):
    """`normexp train -m ... --cfg job`: every job of the sweep, numbered as Hydra numbers them,
    after the overrides they share; exit 0, and no folder or file is made (not even the sweep's)."""
    import itertools

    work = tmp_path / "work"
    work.mkdir()
    proc = run_cli(["train", "-m", "placement=pre,post,deepnorm", "warmup=0,100", "layers=4", "d_model=64",
                    "steps=200", "--cfg", "job", f"hydra.sweep.dir={work / 'sweep'}"], cli_env, cwd=work)
    lines = proc.stdout.strip().splitlines()
    assert lines[0].startswith("normexp train -m: 6 jobs")
    assert lines[1] == f"every job: layers=4 d_model=64 steps=200 hydra.sweep.dir={work / 'sweep'}"
    expected = [f"placement={p} warmup={w}" for p, w in itertools.product(("pre", "post", "deepnorm"), (0, 100))]
    assert lines[2:] == [f"#{i} {job}" for i, job in enumerate(expected)]
    assert list(work.iterdir()) == []  # nothing written: no sweep folder, no runs/
    # -m with --cfg hydra/all (one run's config) is still one line, exit 2
    refused = run_cli(["train", "-m", "placement=pre,post", "--cfg", "all"], cli_env, cwd=work, check=False)
    assert refused.returncode == 2 and "use -m --cfg job to list the sweep's jobs" in refused.stderr


def test_sweep_jobs_come_in_hydras_order():
    """The job list (the dry run's numbers, the pre-flight's checks) is the order in which Hydra's
    basic sweeper runs the jobs: the preset's params first, a command-line key in its place."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from normexp.config.compose import sweep_jobs

    params = {"placement": "post,pre", "warmup": "0,10", "seed": "0,1"}
    command_line = ["layers=2,3", "warmup=0,5,50", "experiment=x"]
    parser = OverridesParser.create()
    hydra_order = BasicSweeper.split_arguments(
        parser.parse_overrides([f"{k}={v}" for k, v in params.items()] + command_line), None)[0]
    assert sweep_jobs(parser.parse_overrides(command_line), params) == hydra_order


def test_version_is_normexps_own(cli_env):
    """`normexp --version` prints the installed package's version; `normexp train --version`
    says normexp's too, not only Hydra's ("Hydra 1.3.8" read like normexp's version)."""
    from importlib.metadata import version

    import hydra

    top = run_cli(["--version"], cli_env)
    assert top.stdout.strip() == f"normexp {version('normexp')}"
    sub = run_cli(["train", "--version"], cli_env)
    assert sub.stdout.strip() == f"normexp {version('normexp')} (Hydra {hydra.__version__})"


def test_top_help_has_no_type_tags_and_whole_lines(cli_env):
    """`normexp --help`: flags without a `<bool>` tag, and each command's summary a whole
    sentence (no line break carried over from a docstring mid-example)."""
    import re

    proc = run_cli(["--help"], {**cli_env, "COLUMNS": "100"})
    assert "<bool>" not in proc.stdout and "--version" in proc.stdout
    # an entry: "  name  text" and its continuation lines (indented deeper)
    entries = dict(re.findall(r"^  (\w+) +(.*(?:\n {4,}.*)*)", proc.stdout.split("Commands:")[1], re.M))
    assert set(entries) == {"train", "resume", "report", "probe", "bench"}
    for name, entry in entries.items():
        summary = " ".join(entry.split())
        assert summary.endswith(".") and "..." not in summary, (name, summary)


def test_cfg_job_shows_the_composed_config_and_runs_nothing(tmp_path, cli_env):
    proc = run_cli(["train", "--cfg", "job", "placement=deepnorm", "layers=48", "norm=rms"], cli_env, cwd=tmp_path)
    cfg = yaml.safe_load(proc.stdout)
    assert cfg["layers"] == 48 and cfg["placement"]["name"] == "deepnorm" and cfg["norm"]["name"] == "rms"
    assert cfg["placement"] == {"name": "deepnorm", "alpha": "auto", "beta": "auto"}
    assert "deepnorm" not in cfg  # DeepNorm's constants are the placement's own settings
    assert not (tmp_path / "runs").exists()



@pytest.mark.parametrize("layers", [48, 1000])
def test_cfg_job_shows_the_deepnorm_constants_the_run_uses(tmp_path, cli_env, layers):
    """`alpha: auto` alone does not say what the run uses: each auto setting carries the number
    as a comment, DeepNorm's α = (2N)^(1/4) and β = (8N)^(-1/4) for N = layers (Wang et al. 2022)."""
    import re

    proc = run_cli(["train", "--cfg", "job", "placement=deepnorm", f"layers={layers}", "d_model=32", "heads=2",
                    "batch_size=1", "seq_len=16"], cli_env, cwd=tmp_path)  # small enough to fit in memory
    assert yaml.safe_load(proc.stdout)["placement"] == {"name": "deepnorm", "alpha": "auto", "beta": "auto"}
    shown = dict(re.findall(r"^  (alpha|beta): auto  # ([0-9.e+-]+) for layers=" + str(layers), proc.stdout, re.M))
    assert float(shown["alpha"]) == pytest.approx((2 * layers) ** 0.25, rel=1e-5)
    assert float(shown["beta"]) == pytest.approx((8 * layers) ** -0.25, rel=1e-5)
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_deepnorm_run_records_the_papers_constants(tmp_path, corpus, cli_env):
    run = tmp_path / "run"
    run_cli(["train", "data=text", f"data.files=[{corpus}]", *TINY, "placement=deepnorm", "layers=48",
             "d_model=16", "steps=2", f"hydra.run.dir={run}"], cli_env)
    summary = read_summary(run)
    assert summary["status"] in RAN_TO_THE_END and summary["layers"] == 48
    assert abs(summary["placement_settings"]["alpha"] - 96 ** 0.25) < 1e-9  # (2N)^(1/4) ≈ 3.130
    assert abs(summary["placement_settings"]["beta"] - 384 ** -0.25) < 1e-9  # (8N)^(-1/4) ≈ 0.226
    saved = yaml.safe_load((run / ".hydra" / "config.yaml").read_text())
    assert saved["placement"]["name"] == "deepnorm" and saved["layers"] == 48


@pytest.mark.slow
def test_single_run_writes_the_run_folder_contract(tmp_path, corpus, cli_env):
    proc = run_cli(["train", "data=text", f"data.files=[{corpus}]", *TINY, "steps=6", "eval_every=3"], cli_env,
                   cwd=tmp_path)
    runs = sorted((tmp_path / "runs").glob("*/*/summary.json"))  # runs/<date>/<time>/
    assert len(runs) == 1, proc.stderr
    run = runs[0].parent
    summary = json.loads(runs[0].read_text())
    required = ("status", "steps_completed", "final_train_loss", "final_val_loss", "best_val_loss",
                "diverged_at_step", "tokens_per_second", "parameters", "wall_seconds", "norm", "placement",
                "layers", "d_model", "warmup", "lr", "seed", "placement_settings", "norm_settings")
    assert all(k in summary for k in required)
    assert summary["status"] in RAN_TO_THE_END and summary["steps_completed"] == 6
    assert summary["best_val_loss"] <= summary["final_val_loss"]
    assert summary["placement_settings"] == {}  # pre has no settings: nothing written, not a 0
    assert summary["norm_settings"] == {"eps": 1e-5}
    assert (run / ".hydra" / "config.yaml").exists() and list(run.glob("events.out.tfevents.*"))
    # the parameter count is the model's: embeddings + blocks (+ final norm), by hand for 2×32, vocab 256
    d, L, T = 32, 2, 32
    per_block = (3 * d * d + 3 * d) + (d * d + d) + (4 * d * d + 4 * d) + (4 * d * d + d) + 2 * 2 * d
    assert summary["parameters"] == 256 * d + T * d + L * per_block + 2 * d


@pytest.mark.slow
def test_sweep_grid_writes_one_completed_run_per_combination(tmp_path, corpus, cli_env):
    sweep = tmp_path / "sweep"
    run_cli(["train", "-m", "data=text", f"data.files=[{corpus}]", "norm=layer,rms,batch",
             "placement=pre,post,deepnorm,sandwich", "layers=2", "steps=5", "d_model=32", "heads=2",
             "seq_len=32", "batch_size=4", "eval_batches=1", "threads=1", f"hydra.sweep.dir={sweep}"], cli_env)
    summaries = [json.loads(p.read_text()) for p in sweep.glob("*/summary.json")]
    assert len(summaries) == 12
    assert {(s["norm"], s["placement"]) for s in summaries} == {
        (n, p) for n in ("layer", "rms", "batch") for p in ("pre", "post", "deepnorm", "sandwich")}
    assert all(s["status"] in RAN_TO_THE_END and s["steps_completed"] == 5 for s in summaries)
    # readable run names: the keys that vary across the sweep, sorted (what every job shares left out)
    names = {p.name for p in sweep.iterdir() if p.is_dir()}
    assert names == {f"norm={n},placement={p}" for n in ("layer", "rms", "batch") for p in ("pre", "post", "deepnorm", "sandwich")}


@pytest.mark.slow
def test_resume_takes_a_folder_and_continues_with_the_settings_it_began_with(tmp_path, corpus, cli_env):
    """`normexp resume RUN_DIR` (from another folder, no override typed again) continues an
    interrupted run to its last step; `normexp resume SWEEP_DIR` gives the sweep's own command
    with -m and skips its finished jobs; a folder without a run is one line, exit 2."""
    import signal
    import subprocess
    import sys

    run = tmp_path / "run"
    args = ["train", *TINY, "data=text", f"data.files=[{corpus}]", "steps=60", "log_every=1", "eval_every=20",
            "checkpoint_every=0", f"hydra.run.dir={run}"]
    import held_run  # the run waits after step 5 until the signal is sent: it cannot finish first

    hold = tmp_path / "hold"
    job = subprocess.Popen(held_run.command(hold, 5, args), env=cli_env, text=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    held_run.wait_until_held(hold, job)
    job.send_signal(signal.SIGINT)
    held_run.release(hold)
    job.communicate(timeout=SAFETY_NET_S)
    stopped = read_summary(run)
    assert job.returncode == 130 and stopped["status"] == "interrupted" and stopped["steps_completed"] == 5
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    resumed = run_cli(["resume", str(run)], cli_env, cwd=elsewhere)
    assert "resuming with: normexp train " in resumed.stderr and "steps=60" in resumed.stderr
    assert f"resumed from step {stopped['steps_completed']}" in resumed.stderr
    summary = read_summary(run)
    assert summary["status"] in RAN_TO_THE_END and summary["steps_completed"] == 60

    sweep = tmp_path / "sweep"
    run_cli(["train", "-m", *TINY, "data=text", f"data.files=[{corpus}]", "steps=3", "seed=0,1",
             f"hydra.sweep.dir={sweep}"], cli_env)
    again = run_cli(["resume", str(sweep)], cli_env, cwd=elsewhere)
    (command,) = [ln for ln in again.stderr.splitlines() if "resuming with:" in ln]
    assert " -m " in command and "seed=0,1" in command and f"hydra.sweep.dir={sweep}" in command
    assert again.stderr.count("already finished") == 2

    nothing = run_cli(["resume", str(elsewhere)], cli_env, check=False)
    assert nothing.returncode == 2 and len(nothing.stderr.strip().splitlines()) == 1
    assert "holds no run normexp started" in nothing.stderr
