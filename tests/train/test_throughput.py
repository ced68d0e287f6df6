"""tokens/s measures training steps only: drawing a depth-profile image and saving a
checkpoint are replaced here by a sleep each, and every reported throughput must still match
the steps' own time, read off the loop's end-of-step timestamps with those sleeps taken out."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SAFETY_NET_S, make_corpus

SLEEP = 0.3
BATCH, SEQ = 4, 32


def test_tokens_per_second_leaves_out_images_and_checkpoints(tmp_path, monkeypatch):
    from normexp.runs import checkpoint
    from normexp.runs import reading as runs
    from normexp.train import run_log as train_module  # where the depth-profile image is drawn
    from normexp.config.compose import compose_config
    from normexp.train.alone import train
    from normexp.train.loop import Hooks
    from torch.utils.tensorboard import SummaryWriter

    monkeypatch.setenv("NORMEXP_CACHE", str(tmp_path / "cache"))
    sleeps: list[tuple[float, float]] = []  # (start, end) of each slow extra

    def sleep(*_a, **_k):
        t0 = time.perf_counter()
        time.sleep(SLEEP)
        sleeps.append((t0, time.perf_counter()))

    # the image and the checkpoint become pure sleeps, so the rest of each interval is the steps
    # (and a 2-batch evaluation): the sleeps are the only large thing tokens/s must leave out
    monkeypatch.setattr(train_module, "depth_profile_figure", sleep)
    monkeypatch.setattr(SummaryWriter, "add_figure", lambda *_a, **_k: None)
    monkeypatch.setattr(checkpoint, "save", sleep)
    corpus = make_corpus(tmp_path / "corpus.txt")
    cfg = compose_config(["data=text", f"data.files=[{corpus}]", "steps=20", "log_every=5", "log.profiles_every=5",
                          "checkpoint_every=5", "eval_every=10", "layers=2", "d_model=32", "heads=2",
                          f"seq_len={SEQ}", f"batch_size={BATCH}", "eval_batches=2", "log.progress=off", "threads=1",
                          "warmup=0"])
    stamps: dict[int, float] = {}
    run = tmp_path / "run"
    run.mkdir()
    summary = train(cfg, run, hooks=Hooks(on_step=lambda s: stamps.__setitem__(s, time.perf_counter())))
    assert len(sleeps) >= 5 + 3  # images at 0, 5, 10, 15, 19; checkpoints after steps 5, 10, 15

    reported = dict(runs.load_scalars(run)["perf/tokens_per_second"])  # the TensorBoard scalars
    assert sorted(reported) == [5, 10, 15, 19]  # every logging step but the first (warm-up)
    logged = [0, 5, 10, 15, 19]
    for a, b in zip(logged, logged[1:]):
        slept = sum(e - s for s, e in sleeps if stamps[a] < s < stamps[b])
        assert slept >= SLEEP  # each interval holds at least one slow extra
        steps_time = stamps[b] - stamps[a] - slept  # the steps, plus evaluation and bookkeeping
        floor = (b - a) * BATCH * SEQ / steps_time
        # the timed steps are part of steps_time, so the rate is at least floor; with the sleeps
        # counted it would be below (b - a)·B·T / SLEEP, far under floor for this tiny model
        assert floor <= reported[b] <= 3 * floor, (a, b, reported[b], floor)
    assert summary["tokens_per_second"] == pytest.approx(reported[19], rel=1e-5)
    assert (Path(run) / "summary.json").is_file()


def test_throughput_meter_counts_step_time_less_the_excluded_and_drops_warm_up(monkeypatch):
    """The meter with a scripted clock: the rate is tokens over (step time − excluded time)
    summed over the window, and a window not reported (warm-up) leaves the last rate."""
    from normexp.train import loop as train_module
    from normexp.train.loop import ThroughputMeter

    clock = iter([0.0, 1.0, 1.0, 3.0, 3.5, 7.0, 7.0, 8.0])
    monkeypatch.setattr(train_module.time, "perf_counter", lambda: next(clock))
    meter = ThroughputMeter(tokens_per_step=100, tokens_per_second=42.0)
    meter.step_done()                  # 0 → 1: 1 s
    meter.restart()
    meter.exclude(0.5)
    meter.step_done()                  # 1 → 3, less 0.5 s drawing: 1.5 s
    assert meter.window_rate(report=False) is None and meter.tokens_per_second == 42.0
    meter.restart()
    meter.step_done()                  # 3.5 → 7: 3.5 s
    meter.restart()
    meter.step_done()                  # 7 → 8: 1 s
    assert meter.window_rate() == pytest.approx(200 / 4.5, abs=0.05) == meter.tokens_per_second


# ------------------------------------------------------- OpenMP's wait policy (issue 31)

# Run in a fresh interpreter: records OMP_WAIT_POLICY at the moment `import torch` begins (the
# audit hook fires before the module loads), then imports the entry point given in argv[1].
_WAIT_POLICY_AT_TORCH_IMPORT = r"""
import os, sys
seen = []
def hook(event, args):
    if event == "import" and args[0] == "torch" and not seen:
        seen.append(os.environ.get("OMP_WAIT_POLICY", "<unset>"))
sys.addaudithook(hook)
import importlib
importlib.import_module(sys.argv[1])
import torch
print("AT_TORCH_IMPORT=" + seen[0])
"""


def _child(code: str, *args: str, **env_changes) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_DISPLAY_ENV", "NORMEXP_OMP_WAIT")}
    env.update(env_changes)
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
                          timeout=SAFETY_NET_S, check=True)


@pytest.fixture
def busy_core():
    """Another process keeping one core busy for the length of the test (a CPU hog)."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    time.sleep(0.5)  # past its start-up, spinning
    yield
    hog.kill()
    hog.wait()


def test_a_busy_core_is_measured(busy_core):
    from normexp.train.threads import others_busy_cores

    # the hog alone is one core; /proc/stat's ticks are 10 ms, so 0.3 s reads it to ±0.1 core
    assert others_busy_cores(0.3) >= 0.8


def test_the_rule_passive_when_others_keep_half_a_core_busy():
    from normexp.train.threads import BUSY_CORES, CHOSEN_BY, configure

    idle: dict = {}
    assert configure(idle, busy_cores=BUSY_CORES - 0.1).startswith("spinning")
    assert idle == {}  # OpenMP's default is left as it is
    busy: dict = {}
    assert configure(busy, busy_cores=BUSY_CORES).startswith("passive")
    assert busy["OMP_WAIT_POLICY"] == "PASSIVE" and CHOSEN_BY in busy
    # a process started by that one looks again: the inherited choice is not the user's
    inherited = dict(busy)
    configure(inherited, busy_cores=0.0)
    assert inherited == {}
    # the user's choice stands whatever the load
    users = {"OMP_WAIT_POLICY": "ACTIVE"}
    assert configure(users, busy_cores=2.0).startswith("as set by the user")
    assert users == {"OMP_WAIT_POLICY": "ACTIVE"}


def test_on_a_busy_machine_openmp_waits_passively_from_before_torch_loads(busy_core):
    """The command line (every `normexp` command, sweep jobs and the bench included) sets
    OMP_WAIT_POLICY=PASSIVE before anything imports torch when another process holds a core."""
    assert "AT_TORCH_IMPORT=PASSIVE" in _child(_WAIT_POLICY_AT_TORCH_IMPORT, "normexp.cli").stdout


def test_on_a_busy_machine_the_openmp_runtime_sleeps_at_once(busy_core):
    """What the OpenMP runtime itself read when torch loaded it: with OMP_DISPLAY_ENV=verbose
    libgomp prints its settings as it loads, the spin count among them (300,000 by default,
    0 under the passive policy; libgomp shows the policy as PASSIVE even when unset, so the
    spin count is what tells)."""
    result = _child("import normexp.cli, torch", OMP_DISPLAY_ENV="verbose")
    shown = result.stderr + result.stdout
    if "GOMP_SPINCOUNT" not in shown:
        pytest.skip("torch's OpenMP runtime is not libgomp (it does not display GOMP_SPINCOUNT)")
    assert re.search(r"GOMP_SPINCOUNT\s*=\s*'0'", shown), shown


def test_a_wait_policy_the_user_chose_is_kept(busy_core):
    code = _WAIT_POLICY_AT_TORCH_IMPORT
    assert "AT_TORCH_IMPORT=ACTIVE" in _child(code, "normexp.cli", OMP_WAIT_POLICY="ACTIVE").stdout
    # GOMP_SPINCOUNT overrides the policy in libgomp: with it set, no policy is added
    assert "AT_TORCH_IMPORT=<unset>" in _child(code, "normexp.cli", GOMP_SPINCOUNT="1000").stdout


def test_a_worker_that_did_not_choose_reports_what_it_inherited(monkeypatch):
    """joblib's and submitit's workers load torch before normexp's code runs in them: the run's
    log says the policy they were started with, not "not chosen"."""
    from normexp.train import threads as threads_env

    monkeypatch.setattr(threads_env, "CHOICE", None)
    parent: dict = {}
    threads_env._choose(parent, 1.0)  # what the sweep's process chose on a busy machine
    assert threads_env.current_choice(parent).startswith("passive, inherited")
    assert threads_env.current_choice({}).startswith("spinning, OpenMP's default (inherited")
    assert threads_env.current_choice({"OMP_WAIT_POLICY": "ACTIVE"}) == "as set by the user (OMP_WAIT_POLICY=ACTIVE)"
    monkeypatch.setattr(threads_env, "CHOICE", "spinning, chosen here")
    assert threads_env.current_choice(parent) == "spinning, chosen here"
