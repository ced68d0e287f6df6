"""The line a sweep's job prints when it is interrupted ("resume with: normexp resume FOLDER")
continues the same sweep: what it runs composes the sweeper and launcher the sweep was started with, with their
settings, into the same folder (not a one-job grid with the basic sweeper, or local solo jobs)."""

import shlex
import signal
import subprocess

from conftest import TINY, make_corpus

import held_run
from normexp.runs.resume import resume_arguments


def test_interrupted_boundary_search_in_packs_prints_a_line_that_keeps_its_sweeper_and_launcher(tmp_path, cli_env):
    corpus = make_corpus(tmp_path / "corpus.txt", 20_000)
    sweep = tmp_path / "search"
    hydra_settings = ["hydra/sweeper=boundary", "hydra.sweeper.key=lr", "hydra.sweeper.lower=0.001",
                      "hydra.sweeper.upper=0.01", "hydra.sweeper.initial_points=2", "hydra/launcher=packed",
                      "hydra.launcher.max_members=2"]
    args = ["train", "-m", *hydra_settings, *TINY, "data=text", f"data.files=[{corpus}]", "steps=200", "warmup=0",
            f"hydra.sweep.dir={sweep}"]
    proc = subprocess.Popen(held_run.command(tmp_path / "hold", "begin", args), env=cli_env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        held_run.wait_until_held(tmp_path / "hold", proc)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=held_run.HELD_WITHIN_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, err[-3000:]
    lines = [line.split("resume with: ", 1)[1] for line in err.splitlines() if "resume with: " in line]
    assert lines and len(set(lines)) == 1, err[-3000:]  # every job running (the search's schedule) says the same
    assert shlex.split(lines[0]) == ["normexp", "resume", str(sweep)]  # short: the folder holds the rest
    # what `normexp resume FOLDER` runs: the sweep's command, Hydra's settings kept, into the folder
    pasted = ["normexp", "train", *resume_arguments(sweep)]
    assert pasted[:3] == ["normexp", "train", "-m"]
    for setting in hydra_settings:
        assert setting in pasted, (setting, pasted)
    assert "resume=true" in pasted and any(a.startswith("hydra.sweep.dir=") and a.endswith(f"{sweep}'")
                                           or a == f"hydra.sweep.dir={sweep}" for a in pasted), pasted

    # the line's overrides compose the search and the packs it was started with (composed, not run)
    from normexp.config.compose import compose_config

    hydra = compose_config([a for a in pasted[3:] if not a.startswith(("resume=", "hydra.sweep.dir="))], hydra=True).hydra
    assert hydra.sweeper._target_.endswith("BoundarySweeper"), hydra.sweeper
    assert (hydra.sweeper.key, hydra.sweeper.lower, hydra.sweeper.upper, hydra.sweeper.initial_points) == ("lr", 0.001, 0.01, 2)
    assert hydra.launcher._target_.endswith("PackedLauncher") and hydra.launcher.max_members == 2
