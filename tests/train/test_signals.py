"""Stopping: a run whose single step takes minutes still ends promptly on SIGTERM, with
status "interrupted" and its folder readable; a bad cache folder is one line, exit 2."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import held_run
import pytest
from conftest import SAFETY_NET_S, make_corpus, read_summary

from normexp.train.signals import GRACE_SECONDS

# One step of this model takes minutes on one CPU thread (attention over 60,000 positions,
# forward and backward; device=cpu, as a GPU takes it in milliseconds): the signal arrives
# mid-step, never at a step boundary.
SLOW_STEP = ["layers=2", "d_model=64", "heads=2", "seq_len=60000", "batch_size=2", "steps=3", "warmup=0",
             "log_every=1", "eval_batches=1", "log.progress=lines", "threads=1", "checkpoint_every=0", "device=cpu"]


@pytest.mark.slow
def test_sigterm_during_a_step_of_minutes_ends_within_seconds(tmp_path, cli_env):
    corpus = make_corpus(tmp_path / "corpus.txt", n_bytes=700_000)
    run = tmp_path / "run"
    hold = tmp_path / "hold"  # the run marks the moment step 0 begins (tests/held_run.py)
    proc = subprocess.Popen(held_run.command(hold, "begin", ["train", "data=text", f"data.files=[{corpus}]",
                                                             *SLOW_STEP, f"hydra.run.dir={run}"]),
                            env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        held_run.wait_until_held(hold, proc)
        assert json.loads((run / "summary.json").read_text())["status"] == "running"
        assert proc.poll() is None, "the step ended too soon to test a stop in the middle of one"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=held_run.HELD_WITHIN_S)  # a safety net: the step itself takes minutes
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, err[-2000:]
    # it did not wait for the step to finish: the grace ran out mid-step (no timing asserted, so a
    # slow machine cannot fail it; a step of minutes cannot end within the grace anywhere)
    assert "step 0 " not in err
    assert f"interrupted by SIGTERM: stopped at once (a second signal, or no step boundary within {GRACE_SECONDS:.0f} s)" in err, err[-2000:]
    summary = read_summary(run)
    assert summary["status"] == "interrupted" and summary["steps_completed"] == 0
    assert (run / ".hydra" / "config.yaml").exists() and list(run.glob("events.out.tfevents.*"))


def _one_line_exit_2(env, tmp_path, expected):
    proc = subprocess.run([sys.executable, "-m", "normexp.cli", "train", "steps=1"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=held_run.HELD_WITHIN_S)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("normexp: error: NORMEXP_CACHE="), proc.stderr
    assert expected in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "runs").exists()


def test_a_cache_folder_that_cannot_be_created_is_one_line(tmp_path, cli_env):
    _one_line_exit_2({**cli_env, "NORMEXP_CACHE": "/proc/nope"}, tmp_path, "/proc/nope: cannot create it")


def test_a_cache_path_that_is_a_file_is_one_line(tmp_path, cli_env):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    _one_line_exit_2({**cli_env, "NORMEXP_CACHE": str(a_file)}, tmp_path, "is a file, not a folder")


def test_the_watchdog_does_not_fire_when_the_loop_stops_in_time():
    """A first signal that the loop acts on within the grace period: no hard stop. The only
    time that must stay within the grace is from the signal to `check()` (a few bytecodes):
    `check()` marks the stop as acted on before its slow import (normexp.train.distributed, hence
    torch, which takes seconds on a slow or busy CPU), so this holds on any machine."""
    code = ("import os, signal, sys, time\n"
            "from normexp.train.signals import StopSignals, Interrupted\n"
            "assert 'torch' not in sys.modules  # check() below is the first to import it\n"
            "class SlowImport:  # a CPU on which importing normexp.train.distributed outlasts the grace\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'normexp.train.distributed':\n"
            "            time.sleep(3)\n"
            "        return None\n"
            "sys.meta_path.insert(0, SlowImport())\n"
            "hard = []\n"
            "with StopSignals(on_hard_stop=hard.append, grace=2.0) as stop:\n"
            "    with stop.deferred():\n"
            "        os.kill(os.getpid(), signal.SIGTERM)\n"
            "        time.sleep(0.05)\n"
            "        try:\n"
            "            stop.check()\n"
            "        except Interrupted as e:\n"
            "            time.sleep(3)  # saving takes longer than the grace period: still no hard stop\n"
            "            print('stopped', e.exit_code, hard)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=held_run.HELD_WITHIN_S)
    assert out.returncode == 0 and out.stdout.strip() == "stopped 143 []", out.stderr


def test_preemption_signal_waits_for_the_step_boundary_then_goes_to_the_previous_handler():
    """Inside a submitit job (a Python handler for SIGUSR2 is installed), the signal is
    deferred to `check()`, which raises Preempted; `forward` then calls the handler that was
    there before (submitit's, which requeues the job). Without such a handler it is left alone."""
    from normexp.train.signals import Interrupted, Preempted, StopSignals

    calls = []
    previous = signal.signal(signal.SIGUSR2, lambda signum, frame: calls.append(signum))
    try:
        stop = StopSignals()
        with stop, stop.deferred():
            os.kill(os.getpid(), signal.SIGUSR2)
            time.sleep(0.1)  # the handler runs; nothing is raised mid-step
            assert calls == []
            try:
                stop.check()
                raise AssertionError("check() did not raise")
            except Preempted as e:
                assert isinstance(e, Interrupted) and e.signum == signal.SIGUSR2
        assert signal.getsignal(signal.SIGUSR2) is not stop._handle  # restored on exit
        stop.forward(signal.SIGUSR2)
        assert calls == [signal.SIGUSR2]
        # SIGTERM is still a plain stop
        with StopSignals() as plain, plain.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
            try:
                plain.check()
                raise AssertionError("check() did not raise")
            except Preempted:
                raise AssertionError("SIGTERM is not a preemption")
            except Interrupted as e:
                assert e.signum == signal.SIGTERM
        # no Python handler for the signal (not a submitit job): StopSignals does not take it
        signal.signal(signal.SIGUSR2, signal.SIG_IGN)
        with StopSignals():
            assert signal.getsignal(signal.SIGUSR2) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGUSR2, previous)


def _catches_sigterm(pid: int) -> bool:
    """normexp's start-up handler is in place: the process catches SIGTERM (Python itself only
    catches SIGINT), read from /proc/PID/status (Linux)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(caught & (1 << (signal.SIGTERM - 1)))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/PID/status")
@pytest.mark.parametrize("delay", [0.0, 0.3, 1.0, 2.0, "running"])
def test_ctrl_c_at_any_moment_of_start_up_ends_the_run_as_interrupted(tmp_path, cli_env, delay):
    """SIGINT at several points of start-up (torch and hydra being imported, the pre-flight,
    Hydra making the folder, data loading; "running" = once training has begun): exit 130,
    one line, and either no run folder or a run recorded "interrupted", never "failed" and
    never trained to the end. The delays count from the moment normexp's handler is in place
    (the first thing `main()` does), so a slow machine only moves where they land."""
    corpus = make_corpus(tmp_path / "corpus.txt")
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "normexp.cli", "train", "data=text", f"data.files=[{corpus}]",
                             "layers=2", "d_model=32", "heads=2", "seq_len=32", "batch_size=4", "steps=100000",
                             "warmup=0", "log.progress=lines", "threads=1", f"hydra.run.dir={run}"],
                            env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + held_run.HELD_WITHIN_S  # a safety net: start-up takes minutes on a busy machine
        while not _catches_sigterm(proc.pid) and proc.poll() is None and time.time() < deadline:
            time.sleep(0.005)
        if delay == "running":
            while time.time() < deadline and proc.poll() is None:
                summary = run / "summary.json"
                if summary.exists() and json.loads(summary.read_text()).get("status") == "running":
                    break
                time.sleep(0.05)
        else:
            time.sleep(delay)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=held_run.HELD_WITHIN_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, err[-2000:]
    assert "Traceback" not in err and "AttributeError" not in err, err[-2000:]
    if (run / "summary.json").exists():
        summary = read_summary(run)
        assert summary["status"] == "interrupted", summary
    else:
        assert "interrupted by SIGINT" in err.strip().splitlines()[-1], err[-2000:]


def test_the_start_up_handler_is_in_place_before_hydra_and_torch_are_imported(tmp_path, cli_env):
    """What makes the test above hold from the first moment: when `normexp train` first imports
    hydra and torch (the slow part of start-up), SIGINT and SIGTERM already go to normexp's
    handler, not to Python's KeyboardInterrupt (raised halfway through an import)."""
    corpus = make_corpus(tmp_path / "corpus.txt")
    code = ("import os, signal, sys\n"
            "seen = {}\n"
            "def hook(event, args):\n"
            "    if event == 'import' and args[0] in ('hydra', 'torch') and args[0] not in seen:\n"
            "        seen[args[0]] = [getattr(signal.getsignal(s), '__qualname__', str(signal.getsignal(s)))\n"
            "                         for s in (signal.SIGINT, signal.SIGTERM)]\n"
            "        if len(seen) == 2:\n"
            "            print(seen, flush=True)\n"
            "            os._exit(0)\n"
            "sys.addaudithook(hook)\n"
            "from normexp.cli import main\n"
            f"sys.argv = ['normexp', 'train', 'data=text', 'data.files=[{corpus}]', 'steps=1']\n"
            "main()\n")
    out = subprocess.run([sys.executable, "-c", code], env=cli_env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=held_run.HELD_WITHIN_S)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == str({"hydra": ["_remember", "_remember"], "torch": ["_remember", "_remember"]})


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 128 + signal.SIGTERM)])
def test_a_stopped_run_says_normexp_resume_and_its_folder(tmp_path, cli_env, sig, code):
    """Ctrl-C (SIGINT) and SIGTERM at a step boundary: the warning names `normexp resume FOLDER`
    (the run's own folder, absolute), not the train command with its overrides and Hydra's
    quoting."""
    from conftest import TINY

    corpus = make_corpus(tmp_path / "corpus.txt", n_bytes=20_000)
    run, hold = tmp_path / "run", tmp_path / "hold"
    proc = subprocess.Popen(held_run.command(hold, 2, ["train", *TINY, "data=text", f"data.files=[{corpus}]",
                                                       "steps=20", "log_every=1", "eval_every=20",
                                                       f"hydra.run.dir={run}"]),
                            env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        held_run.wait_until_held(hold, proc)
        proc.send_signal(sig)
        held_run.release(hold)
        _, err = proc.communicate(timeout=SAFETY_NET_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err[-2000:]
    (line,) = [ln for ln in err.splitlines() if "resume with: " in ln]
    assert line.endswith(f"resume with: normexp resume {run.resolve()}"), line
    assert read_summary(run)["status"] == "interrupted"


def test_a_sweep_job_is_resumed_by_its_sweep_folder(tmp_path):
    from normexp.runs.checkpoint import resume_folder_command

    sweep = tmp_path / "my sweep"
    (sweep / "seed=0").mkdir(parents=True)
    assert resume_folder_command(sweep / "seed=0") == f"normexp resume '{(sweep / 'seed=0').resolve()}'"
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    assert resume_folder_command(sweep / "seed=0") == f"normexp resume '{sweep.resolve()}'"


def test_wall_seconds_sums_every_segment_of_a_resumed_run(tmp_path, cli_env):
    """A run held 12 s at step 2 and stopped (Ctrl-C), then resumed to its end: the final
    wall_seconds is the first segment's (≥ 12 s, as its summary says) plus the resumed one's,
    which is at most the resuming process's own elapsed time."""
    from conftest import TINY, run_cli

    corpus = make_corpus(tmp_path / "corpus.txt", n_bytes=20_000)
    run, hold = tmp_path / "run", tmp_path / "hold"
    args = ["train", *TINY, "data=text", f"data.files=[{corpus}]", "steps=12", "log_every=1", "eval_every=12",
            f"hydra.run.dir={run}"]
    proc = subprocess.Popen(held_run.command(hold, 2, args), env=cli_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        held_run.wait_until_held(hold, proc)
        time.sleep(12)
        proc.send_signal(signal.SIGINT)
        held_run.release(hold)
        proc.communicate(timeout=SAFETY_NET_S)
    finally:
        if proc.poll() is None:
            proc.kill()
    first = read_summary(run)
    assert first["status"] == "interrupted" and first["wall_seconds"] >= 12
    started = time.time()
    run_cli(["resume", str(run)], cli_env)
    elapsed = time.time() - started
    final = read_summary(run)
    assert final["steps_completed"] == 12
    assert first["wall_seconds"] < final["wall_seconds"] <= first["wall_seconds"] + elapsed
