"""What `normexp train --help` and `--cfg job` say about each key: every key's one-line meaning,
read from the yaml comments; every "auto" with the value a run uses; and eval_every=auto, the
evaluation cadence that scales with the run without changing its training."""

import os
import re
import subprocess
import sys
from importlib.resources import files

import pytest
import yaml
from conftest import SAFETY_NET_S, TINY, make_corpus, read_summary, scalar_events

from normexp.config.compose import (annotate, config_groups, group_options, key_comments, key_meanings,
                                    top_level_keys, train_help)
from normexp.config.run_config import LogConfig, eval_interval, log_interval


def test_key_comments_reads_trailing_comments_their_continuations_and_blocks():
    text = ("defaults:\n"
            "  - norm: layer      # the norm\n"
            "  - placement: pre   # where it sits |\n"
            "                     # and more\n"
            "a: 1                 # first\n"
            "                     # second\n"
            "b:\n"
            "  c: 'x # y'         # quoted # kept\n"
            "  # above d\n"
            "  d: 2\n"
            "e: 3\n"
            "help:\n"
            "  text: |-\n"
            "    f: not a key     # nor this\n"
            "g: 4   # after the block\n")
    assert key_comments(text) == {"norm": "the norm", "placement": "where it sits | and more", "a": "first second",
                                  "b.c": "quoted # kept", "g": "after the block"}
    assert key_comments(text, blocks=True)["b.d"] == "above d"


def test_every_key_of_train_yaml_has_its_one_line_meaning():
    meanings = key_meanings()
    missing = [k for k in top_level_keys() if not meanings.get(k)]
    assert not missing, f"give these keys a comment in configs/train.yaml: {missing}"
    shipped = yaml.safe_load((files("normexp.configs") / "train.yaml").read_text(encoding="utf-8"))
    for entry in shipped["defaults"]:  # each group train.yaml picks: its line says what the options are
        if isinstance(entry, dict) and not any(str(k).startswith("override") for k in entry):
            (group,) = entry
            assert meanings.get(group), group


def test_train_help_gives_each_key_its_meaning_and_lists_the_groups():
    text = train_help(["steps=200"])
    config = text.split("== Config ==", 1)[1]
    assert "\nsteps: 200  # optimizer updates in the run\n" in config  # the override's value, the yaml's words
    assert "\nlr: 0.002  # peak learning rate" in config
    assert "\n  min_lr_ratio: 0.1" in config and "\nhydra:" not in config
    for key in top_level_keys():  # each top-level leaf's line carries a comment
        if "." not in key:
            (line,) = [ln for ln in config.splitlines() if ln.startswith(f"{key}:")]
            assert "  # " in line, line
    groups = text.split("== Configuration groups ==", 1)[1].split("== Presets ==", 1)[0]
    for group in config_groups():
        assert f"\n{group}: {', '.join(group_options(group))}\n" in groups
    assert "lr_boundary" in text.split("== Presets ==", 1)[1]


def test_annotate_finds_nested_keys_and_leaves_lists_alone():
    text = "a: 1\nlog:\n  every: auto\n  items:\n  - 1\n  - 2\nb: auto\n"
    out = annotate(text, {"log.every": "30 here", "b": "x", "log": "the log"})
    assert out == "a: 1\nlog:  # the log\n  every: auto  # 30 here\n  items:\n  - 1\n  - 2\nb: auto  # x\n"


@pytest.mark.parametrize("steps, batches, every", [(600, 8, 30), (200, 8, 27), (150, 8, 27), (2000, 8, 100),
                                                   (40, 2, 7), (100_000, 8, 5000), (1, 1, 4)])
def test_eval_every_auto_is_about_20_a_run_within_a_tenth_of_the_time(steps, batches, every):
    assert eval_interval(steps, batches) == every
    evaluations = sum(1 for s in range(1, steps + 1) if s % every == 0 or s == steps)
    assert evaluations <= 21  # about 20, and never more than 20 plus the last step
    assert evaluations * batches / 3 <= 0.1 * steps + batches / 3  # at most ~10 % of the steps' time


def test_an_explicit_eval_every_is_kept_and_auto_is_resolved_on_reading(cli_env):
    from normexp.config.compose import compose_config

    assert LogConfig.from_composed(compose_config(["eval_every=100"])).eval_every == 100
    assert LogConfig.from_composed(compose_config([])).eval_every == 30  # the default: auto at 600 steps
    assert LogConfig.from_composed(compose_config(["steps=200", "eval_batches=2"])).eval_every == 10


@pytest.mark.parametrize("steps, every", [(200, 5), (600, 15), (1, 1), (39, 1), (79, 1), (80, 2), (100_000, 2500)])
def test_log_every_auto_logs_at_least_40_points_a_run(steps, every):
    """log_every=auto: steps // 40, at least 1. Counted by the run's own logging-step rule
    (train/loop.is_logging_step): every step of a run under 40 steps, else 40 to 81 points."""
    from normexp.train.loop import is_logging_step

    assert log_interval(steps) == every
    points = sum(is_logging_step(s, every, steps) for s in range(steps))
    assert points == steps if steps < 40 else 40 <= points <= 81


def test_an_explicit_log_every_is_kept_and_auto_is_resolved_on_reading(cli_env):
    from normexp.config.compose import compose_config

    assert LogConfig.from_composed(compose_config(["log_every=50"])).log_every == 50
    assert LogConfig.from_composed(compose_config(["log_every=50", "steps=200"])).log_every == 50
    assert LogConfig.from_composed(compose_config([])).log_every == 15  # the default: auto at 600 steps
    assert LogConfig.from_composed(compose_config(["steps=200"])).log_every == 5
    assert LogConfig.from_composed(compose_config(["experiment=lr_sensitivity"])).log_every == 50  # a preset's own


@pytest.mark.parametrize("value", ["0", "-5", "often", "2.5"])
def test_a_bad_log_every_is_one_line_naming_auto(cli_env, value):
    out = subprocess.run([sys.executable, "-m", "normexp.cli", "train", f"log_every={value}"], env=cli_env,
                         capture_output=True, text=True, timeout=SAFETY_NET_S)
    assert out.returncode == 2 and 'must be "auto" or a positive integer' in out.stderr, out.stderr[-2000:]


def test_the_readme_first_sweep_logs_at_least_40_points_a_tag(tmp_path, cli_env):
    """A 200-step run at the default log_every: every train and per-layer tag has 41 points
    (steps 0, 5, ..., 195 and 199); the same run at log_every=50 has 5 (an explicit value wins)."""
    corpus = make_corpus(tmp_path / "corpus.txt", n_bytes=20_000)
    counts = {}
    for every in ("default", "50"):
        run = tmp_path / every
        chosen = [] if every == "default" else [f"log_every={every}"]
        out = subprocess.run([sys.executable, "-m", "normexp.cli", "train", *TINY, "layers=1", "d_model=16",
                              "seq_len=16", "batch_size=2", "eval_batches=1", "data=text", f"data.files=[{corpus}]",
                              "steps=200", "eval_every=200", "log.model_update=false", *chosen,
                              f"hydra.run.dir={run}"], env=cli_env, capture_output=True, text=True, timeout=SAFETY_NET_S)
        assert out.returncode == 0, out.stderr[-2000:]
        events = scalar_events(run)
        counts[every] = {tag: [s for s, _ in events[tag]] for tag in ("train/loss", "grad_norm/layer_00")}
        # summary.json's val trajectory is TensorBoard's, from step 0 (the initial model) on
        val = read_summary(run)["loss_trajectory"]["val"]
        assert val == [[s, pytest.approx(v, rel=1e-6)] for s, v in events["val/loss"]] and val[0][0] == 0
    expected = [*range(0, 200, 5), 199]
    assert len(expected) == 41
    assert counts["default"] == {"train/loss": expected, "grad_norm/layer_00": expected}
    assert counts["50"]["train/loss"] == [0, 50, 100, 150, 199]


def _cfg_job(env, *overrides):
    out = subprocess.run([sys.executable, "-m", "normexp.cli", "train", "--cfg", "job", *overrides], env=env,
                         capture_output=True, text=True, timeout=SAFETY_NET_S)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_cfg_job_gives_every_auto_its_value(cli_env):
    text = _cfg_job(cli_env, "placement=deepnorm", "layers=48", "steps=200")
    autos = [ln for ln in text.splitlines() if re.search(r": auto\b", ln)]
    assert len(autos) == 10 and all("  # " in ln for ln in autos), autos  # none left bare
    cores = len(os.sched_getaffinity(0))
    assert f"threads: auto  # {cores} here: this process's {cores} cores" in text
    assert "eval_every: auto  # 27 for steps=200, eval_batches=8: 8 evaluations after step 0" in text
    assert "log_every: auto  # 5 for steps=200: 41 logging steps" in text  # 0, 5, ..., 195 and 199
    assert "  profiles_every: auto  # 40 for steps=200, log_every=5" in text  # 5 images: every 40, at a logging step
    assert "  alpha: auto  # 3.13017 for layers=48" in text  # (2·48)^¼
    assert "device: auto  # cpu here" in text or "device: auto  # cuda here" in text
    assert ("device: auto  # cpu here" in text and "cuda_graph: auto  # eager here: not on CUDA" in text
            or "cuda_graph: auto  # a graph here" in text)
    assert "  every_step: auto  # true on cpu" in text or "  every_step: auto  # false on cuda" in text
    assert "  progress: auto  # lines here (not a terminal)" in text  # stderr is a pipe here


@pytest.mark.slow
def test_eval_every_auto_changes_the_points_not_the_training(tmp_path, cli_env):
    """The same run evaluated every 40 steps and at eval_every=auto (every 7 here): the same train
    losses and the same final validation loss, bit for bit; more validation points. Each run
    names its folder in its first line, before training."""
    corpus = make_corpus(tmp_path / "corpus.txt", n_bytes=20_000)
    runs = {}
    for every in ("40", "auto"):
        run = tmp_path / every
        out = subprocess.run([sys.executable, "-m", "normexp.cli", "train", *TINY, "data=text",
                              f"data.files=[{corpus}]", "steps=40", "log_every=1", f"eval_every={every}",
                              f"hydra.run.dir={run}"], env=cli_env, capture_output=True, text=True, timeout=SAFETY_NET_S)
        assert out.returncode == 0, out.stderr[-2000:]
        assert out.stderr.splitlines()[0] == f"normexp: run folder: {run}"
        runs[every] = run
    fixed, auto = (scalar_events(runs[k]) for k in ("40", "auto"))
    assert auto["train/loss"] == fixed["train/loss"]
    assert [s for s, _ in fixed["val/loss"]] == [0, 40]
    assert [s for s, _ in auto["val/loss"]] == [0, 7, 14, 21, 28, 35, 40]
    assert auto["val/loss"][-1] == fixed["val/loss"][-1] and auto["val/loss"][0] == fixed["val/loss"][0]
    assert read_summary(runs["auto"])["final_val_loss"] == read_summary(runs["40"])["final_val_loss"]
