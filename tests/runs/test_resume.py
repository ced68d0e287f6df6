"""Never lose a run: SIGKILL + resume equals an uninterrupted run, a kill mid-checkpoint keeps
the previous checkpoint, SIGTERM/SIGINT save and exit 143/130, and resuming a finished run
writes nothing. Every run goes through the real command line in a subprocess."""

import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import held_run
import pytest
import torch
from conftest import RAN_TO_THE_END, SAFETY_NET_S, TINY, cli_environment, make_corpus, read_summary, run_cli, scalar_events

from normexp.runs import checkpoint as ckpt

STEPS = 40


def train_cmd(corpus: Path, run_dir: Path, *extra: str, steps: int = STEPS) -> list[str]:
    """`normexp train` on the tiny model, every step logged (log_every=1), so TensorBoard
    holds the whole loss curve; threads=1 (in TINY) makes CPU losses bit-reproducible."""
    return ["train", *TINY, "data=text", f"data.files=[{corpus}]", f"steps={steps}", "log_every=1",
            "eval_every=10", f"hydra.run.dir={run_dir}", *extra]


class Job:
    """A `normexp train` subprocess whose stderr lines can be awaited. `held_at`: the step after
    which the run waits until `signal` releases it (tests/held_run.py), so that a signal lands
    at that step on any machine, however fast; `hold` is the folder of its marker files."""

    def __init__(self, args: list[str], env: dict, held_at: int | None = None, hold: Path | None = None):
        self.hold = hold
        argv = ([sys.executable, "-m", "normexp.cli", *args] if held_at is None
                else held_run.command(hold, held_at, args))
        self.proc = subprocess.Popen(argv, env=env, text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.lines: list[str] = []
        self._drained = False
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stderr:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, text: str, timeout: float = 120) -> str:
        """Block until a stderr line contains `text`; fail if the process ends first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                break
            self.lines.append(line)
            if text in line:
                return line
        self.proc.kill()
        raise AssertionError(f"never saw {text!r}; stderr:\n{''.join(self.lines)[-3000:]}")

    def signal_when_held(self, signum: int) -> None:
        """Wait until the held run waits at its step, send `signum`, then let it go on: it meets
        the signal at that step boundary (the signal is pending before the release exists)."""
        held_run.wait_until_held(self.hold, self.proc)
        self.proc.send_signal(signum)
        held_run.release(self.hold)

    def finish(self, timeout: float = 120) -> tuple[int, str]:
        """Wait for the exit; (exit code, all of stderr). Safe to call again."""
        code = self.proc.wait(timeout=timeout)
        if not self._drained:
            while (line := self._queue.get(timeout=SAFETY_NET_S)) is not None:
                self.lines.append(line)
            self._drained = True
        return code, "".join(self.lines)


def newest_checkpoint_step(run_dir: Path) -> int:
    return ckpt.load_latest(run_dir)["step"]


def folder_state(folder: Path) -> dict[str, tuple[int, int]]:
    """{relative path: (size, mtime_ns)} of every file below `folder`."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A corpus and environment for the whole module, and the uninterrupted reference run,
    started at once so that it trains alongside the first test's victim."""
    root = tmp_path_factory.mktemp("resume")
    env = cli_environment(root / "cache")
    corpus = make_corpus(root / "corpus.txt", n_bytes=20_000)
    reference_dir = root / "reference"
    reference = Job(train_cmd(corpus, reference_dir, "checkpoint_every=10"), env)
    yield corpus, env, reference_dir, reference
    reference.proc.kill()


@pytest.fixture
def corpus(shared):
    return shared[0]


@pytest.fixture
def cli_env(shared):
    return shared[1]


def finished_reference(shared) -> Path:
    code, stderr = shared[3].finish()
    assert code == 0, stderr[-2000:]
    return shared[2]


@pytest.mark.slow
def test_sigkill_then_resume_matches_an_uninterrupted_run(tmp_path, shared, corpus, cli_env):
    killed_dir = tmp_path / "killed"
    # killed at step 15, between its checkpoints of steps 10 and 20: resume redoes steps 11-15
    victim = Job(train_cmd(corpus, killed_dir, "checkpoint_every=10"), cli_env, held_at=15, hold=tmp_path / "hold")
    victim.signal_when_held(signal.SIGKILL)
    code, _ = victim.finish()
    assert code == -signal.SIGKILL
    assert read_summary(killed_dir)["status"] == "running"  # no chance to say goodbye
    from normexp.analysis.report import make_report
    from normexp.runs.reading import read_runs as load_runs

    (run,) = load_runs(killed_dir)  # but its process is gone: report calls it killed
    assert run.summary["pid"] == victim.proc.pid and run.status == "killed"
    lines = []
    make_report(killed_dir, tmp_path / "report", echo=lines.append)
    assert any("was killed" in ln and "resume=true" in ln for ln in "\n".join(map(str, lines)).splitlines()), lines
    resume_step = newest_checkpoint_step(killed_dir)
    assert resume_step == 10

    resumed = run_cli(train_cmd(corpus, killed_dir, "checkpoint_every=10", "resume=true"), cli_env)
    assert f"resumed from step {resume_step}" in resumed.stderr
    reference_dir = finished_reference(shared)

    expected, got = scalar_events(reference_dir), scalar_events(killed_dir)
    steps = [s for s, _ in got["train/loss"]]
    assert steps == list(range(STEPS)), "each step exactly once in TensorBoard"
    for tag, points in expected.items():
        if tag.startswith("perf/"):  # wall-clock throughput: never reproducible
            continue
        assert [s for s, _ in got[tag]] == [s for s, _ in points], f"{tag}: steps differ"
        for (step, want), (_, have) in zip(points, got[tag]):
            assert have == pytest.approx(want, abs=1e-6), f"{tag} at step {step} (resumed from {resume_step})"
    # val/loss: the initial model at step 0, then every 10th step
    assert len(expected["train/loss"]) == STEPS and len(expected["val/loss"]) == STEPS // 10 + 1
    summary, reference_summary = read_summary(killed_dir), read_summary(reference_dir)
    assert summary["status"] in RAN_TO_THE_END and summary["steps_completed"] == STEPS
    assert summary["final_val_loss"] == pytest.approx(reference_summary["final_val_loss"], abs=1e-6)

    # normexp report reads the resumed run like TensorBoard does, without TensorBoard's
    # "Purging expired events" warning (expected after a resume, so not shown)
    from normexp.runs.reading import load_scalars

    seen = []  # whatever TensorBoard's logger lets through while report reads the run
    catcher = logging.Handler()
    catcher.emit = seen.append
    tb_logger = logging.getLogger("tensorboard")
    tb_logger.addHandler(catcher)
    try:
        scalars = load_scalars(killed_dir)
    finally:
        tb_logger.removeHandler(catcher)
    assert [s for s, _ in scalars["train/loss"]] == list(range(STEPS))
    assert not [r for r in seen if "Purging" in r.getMessage()]


def as_format_1(path: Path, frozen_step: float) -> None:
    """Rewrite a checkpoint as normexp wrote it before issue 38: no format key, numpy's RNG
    keys as an ndarray, the status as the enum, and the Adam step count of an earlier save."""
    import numpy as np

    from normexp.runs.schema import Status

    state = torch.load(path, weights_only=False)
    del state["format"]
    kind, keys, *rest = state["rng"]["numpy"]
    state["rng"]["numpy"] = (kind, keys.numpy().astype(np.uint32), *rest)
    state["summary"]["status"] = Status(state["summary"]["status"])
    for s in state["optimizer"]["state"].values():
        s["step"] = torch.tensor(frozen_step)
    torch.save(state, path)


def assert_bit_for_bit(reference_dir: Path, run_dir: Path) -> None:
    """Every logged scalar but wall-clock throughput, and the final losses, exactly equal."""
    expected, got = scalar_events(reference_dir), scalar_events(run_dir)
    assert set(got) == set(expected)
    for tag, points in expected.items():
        if not tag.startswith("perf/"):
            assert got[tag] == points, f"{run_dir.name}: {tag} differs from the uninterrupted run"
    summary, reference = read_summary(run_dir), read_summary(reference_dir)
    for key in ("final_val_loss", "best_val_loss", "final_train_loss", "steps_completed"):
        assert summary[key] == reference[key], f"{run_dir.name}: {key}"


@pytest.mark.slow
def test_resume_after_three_checkpoints_is_bit_exact_after_ctrl_c_sigterm_and_kill_9(tmp_path, corpus, cli_env):
    """Interrupted after its 3rd checkpoint (steps 10, 20, 30), each run resumes to exactly the
    uninterrupted run's losses (CPU, one thread). So does a kill -9 whose newest checkpoint is
    rewritten as an old normexp wrote it, with the frozen Adam step count of the first save:
    its count is repaired from the checkpoint's step, and the log says so in one line. Each run
    waits at step 35 until its signal is sent (tests/held_run.py), so none can finish first."""
    steps, every = 80, "checkpoint_every=10"
    reference_dir = tmp_path / "reference"
    jobs = {"reference": Job(train_cmd(corpus, reference_dir, every, steps=steps), cli_env)}
    signals = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL}
    for name in signals:
        jobs[name] = Job(train_cmd(corpus, tmp_path / name, every, steps=steps), cli_env, held_at=35,
                         hold=tmp_path / f"hold_{name}")
    for name, signum in signals.items():
        jobs[name].signal_when_held(signum)
    for name, job in jobs.items():
        code, stderr = job.finish()
        assert code == {"reference": 0, "SIGINT": 130, "SIGTERM": 143}.get(name, -signal.SIGKILL), stderr[-2000:]
    # the old-format case is a kill -9 too: a copy of the killed run, made before either resumes
    shutil.copytree(tmp_path / "SIGKILL", tmp_path / "format1")
    signals["format1"] = signal.SIGKILL
    for name in signals:
        run_dir = tmp_path / name
        state = ckpt.load_latest(run_dir)
        # Ctrl-C and SIGTERM stop at the step boundary they arrive at and save it; kill -9 leaves the 3rd
        assert state["step"] == (30 if signals[name] == signal.SIGKILL else 35), name
        counts = {float(s["step"]) for s in state["optimizer"]["state"].values()}
        assert counts == {float(state["step"])}, f"{name}: the optimizer's step count in the checkpoint"
        if name == "format1":
            as_format_1(ckpt.list_checkpoints(run_dir)[-1], frozen_step=10.0)
        resumed = run_cli(train_cmd(corpus, run_dir, every, "resume=true", steps=steps), cli_env)
        assert f"resumed from step {state['step']}" in resumed.stderr
        repaired = [ln for ln in resumed.stderr.splitlines() if "frozen Adam step count" in ln]
        if name == "format1":
            assert len(repaired) == 1 and f"(10 instead of {state['step']}" in repaired[0], resumed.stderr[-2000:]
        else:
            assert not repaired
        assert_bit_for_bit(reference_dir, run_dir)


class CodeInPickle:
    """Unpickling this calls os.system: what a planted checkpoint could do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def plant_payload(run_dir: Path, marker: Path) -> Path:
    path = ckpt.checkpoint_dir(run_dir) / "step_99999999.pt"
    torch.save({"step": 99999999, "model": {"w": torch.zeros(1)}, "payload": CodeInPickle(marker)}, path)
    return path


def test_a_checkpoint_that_would_run_code_is_refused_unopened(tmp_path):
    """load_latest reads the pickle's opcodes first: a global normexp never stores (os.system)
    is refused in one line naming the file, before anything is unpickled, instead of being
    skipped for the checkpoint before it."""
    from normexp.config.checks import ConfigError

    run_dir, marker = tmp_path / "run", tmp_path / "marker"
    ckpt.save(run_dir, tiny_state(10))
    planted = plant_payload(run_dir, marker)
    with pytest.raises(ConfigError) as refused:
        ckpt.load_latest(run_dir)
    message = str(refused.value)
    assert "\n" not in message and str(planted) in message and "system" in message and "remove it" in message
    assert not marker.exists()
    planted.unlink()
    assert ckpt.load_latest(run_dir)["step"] == 10  # the file normexp wrote still loads


@pytest.mark.slow
def test_resume_refuses_a_planted_checkpoint_without_running_it(tmp_path, corpus, cli_env):
    run_dir, marker = tmp_path / "run", tmp_path / "marker"
    job = Job(train_cmd(corpus, run_dir, "checkpoint_every=0", steps=100_000), cli_env, held_at=5,
              hold=tmp_path / "hold")
    job.signal_when_held(signal.SIGINT)
    assert job.finish()[0] == 130
    (own,) = ckpt.list_checkpoints(run_dir)
    planted = plant_payload(run_dir, marker)
    before = folder_state(run_dir)
    resumed = run_cli(train_cmd(corpus, run_dir, "checkpoint_every=0", "resume=true", steps=100_000), cli_env,
                      check=False)
    assert resumed.returncode == 2, resumed.stderr[-2000:]
    assert not marker.exists(), "the planted checkpoint ran its code"
    assert "Traceback" not in resumed.stderr
    (line,) = [ln for ln in resumed.stderr.splitlines() if "error:" in ln]  # after the run's start-up lines
    assert str(planted) in line and "not a checkpoint normexp wrote" in line
    assert own.exists() and read_summary(run_dir)["status"] == "interrupted"
    def results(state):  # what the run computed (its log, claim and .hydra are the launch's)
        return {k: v for k, v in state.items() if not k.startswith((".hydra", ".normexp_claim", "train.log"))}
    assert results(folder_state(run_dir)) == results(before)


@pytest.mark.slow
def test_kill_while_a_checkpoint_is_written_keeps_the_previous_one(tmp_path, corpus, cli_env):
    run_dir = tmp_path / "run"
    env = {**cli_env, ckpt.STALL_ENV: "60@20"}  # the step-20 checkpoint stalls half-written
    job = Job(train_cmd(corpus, run_dir, "checkpoint_every=10", steps=25), env)
    job.wait_for("test hook stalls")
    job.proc.send_signal(signal.SIGKILL)
    assert job.finish()[0] == -signal.SIGKILL

    folder = ckpt.checkpoint_dir(run_dir)
    assert [p.name for p in ckpt.list_checkpoints(run_dir)] == ["step_00000010.pt"]
    assert not (folder / "step_00000020.pt").exists()
    (partial,) = folder.glob(".step_00000020.pt.*.tmp")
    assert 0 < partial.stat().st_size < (folder / "step_00000010.pt").stat().st_size  # half of one
    with pytest.raises(Exception):
        torch.load(partial, weights_only=False)
    state = ckpt.load_latest(run_dir)
    assert state["step"] == 10
    assert set(state) >= {"model", "optimizer", "data_generator", "rng", "summary"}


@pytest.mark.slow
def test_sigterm_and_sigint_save_a_checkpoint_and_exit_143_and_130(tmp_path, corpus, cli_env):
    # checkpoint_every=0: only the final checkpoint, so any checkpoint found is the signal's
    jobs = {signum: Job(train_cmd(corpus, tmp_path / signum.name, "checkpoint_every=0", steps=100_000), cli_env,
                        held_at=5, hold=tmp_path / f"hold_{signum.name}")
            for signum in (signal.SIGTERM, signal.SIGINT)}  # both at once: half the wall time
    for signum, job in jobs.items():
        job.signal_when_held(signum)
    for signum, job in jobs.items():
        run_dir, name = tmp_path / signum.name, signum.name
        exit_code, stderr = job.finish()
        assert exit_code == 128 + signum == {"SIGTERM": 143, "SIGINT": 130}[name], stderr[-2000:]
        summary = read_summary(run_dir)
        assert summary["status"] == "interrupted"
        assert summary["steps_completed"] == 5  # held there until the signal was sent
        assert newest_checkpoint_step(run_dir) == summary["steps_completed"]
        assert "Traceback" not in stderr
        (message,) = [line for line in stderr.splitlines() if "interrupted by" in line]
        assert f"interrupted by {name} at step {summary['steps_completed']}: checkpoint saved" in message
        assert message.endswith(f"resume with: normexp resume {run_dir}")
        last_logged = scalar_events(run_dir)["train/loss"][-1][0]
        assert last_logged == summary["steps_completed"] - 1  # TensorBoard was flushed


@pytest.mark.slow
def test_resume_of_a_finished_run_writes_nothing(shared, cli_env, corpus):
    run_dir = finished_reference(shared)
    before = folder_state(run_dir)
    again = run_cli(train_cmd(corpus, run_dir, "checkpoint_every=10", "resume=true"), cli_env)
    assert again.returncode == 0
    status = read_summary(run_dir)["status"]  # completed, or stalled: a tiny run may not beat the unigram baseline
    assert status in RAN_TO_THE_END
    assert f"hydra.run.dir={run_dir} already finished (status {status} at step {STEPS})" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    assert folder_state(run_dir) == before


# ------------------------------------------------------------ checkpoint.py in-process

def tiny_state(step: int) -> dict:
    return {"step": step, "model": {"w": torch.full((3,), float(step))}, "rng": ckpt.capture_rng()}


def optimizer_state(count: float) -> dict:
    return {"state": {0: {"step": torch.tensor(count), "exp_avg": torch.zeros(2), "exp_avg_sq": torch.zeros(2)},
                      1: {"step": torch.tensor(count), "exp_avg": torch.zeros(3), "exp_avg_sq": torch.zeros(3)}},
            "param_groups": []}


def test_an_optimizer_step_count_off_the_training_step_is_refused_or_repaired(tmp_path):
    """Adam's step count is the number of updates, one per training step: equal, it passes; a
    checkpoint of this format that disagrees is refused in one line; one of format 1 (before
    the count was fixed) with one count for all parameters is repaired to the step."""
    from normexp.config.checks import ConfigError

    ckpt.save(tmp_path, {**tiny_state(30), "optimizer": optimizer_state(30.0)})
    state = ckpt.load_latest(tmp_path)
    assert state["format"] == ckpt.FORMAT and ckpt.reconcile_optimizer_steps(state, "s", tmp_path) is None

    wrong = {**state, "optimizer": optimizer_state(10.0)}
    with pytest.raises(ConfigError) as refused:
        ckpt.reconcile_optimizer_steps(wrong, "step_00000030.pt", tmp_path)
    assert "took 10 steps, but the run 30" in str(refused.value) and "\n" not in str(refused.value)

    old = {k: v for k, v in wrong.items() if k != "format"}
    line = ckpt.reconcile_optimizer_steps(old, "step_00000030.pt", tmp_path)
    assert "frozen Adam step count (10 instead of 30" in line
    assert [float(s["step"]) for s in old["optimizer"]["state"].values()] == [30.0, 30.0]

    saved_before_the_first_update = {**state, "optimizer": {"state": {}, "param_groups": []}}
    assert ckpt.reconcile_optimizer_steps(saved_before_the_first_update, "s", tmp_path) is None


def test_save_keeps_the_newest_k_and_clears_a_killed_writes_temp_file(tmp_path):
    folder = ckpt.checkpoint_dir(tmp_path)
    folder.mkdir()
    leftover = folder / ".step_00000020.pt.abc123.tmp"  # what a SIGKILL mid-write leaves
    leftover.write_bytes(b"half a checkpoint")
    for step in (10, 20, 30, 40):
        ckpt.save(tmp_path, tiny_state(step), keep=3)
    assert [p.name for p in ckpt.list_checkpoints(tmp_path)] == [f"step_{s:08d}.pt" for s in (20, 30, 40)]
    assert not leftover.exists()
    assert torch.equal(ckpt.load_latest(tmp_path)["model"]["w"], torch.full((3,), 40.0))


def test_load_latest_falls_back_past_a_damaged_newest_checkpoint(tmp_path):
    for step in (10, 20):
        ckpt.save(tmp_path, tiny_state(step), keep=2)
    newest = ckpt.list_checkpoints(tmp_path)[-1]
    newest.write_bytes(newest.read_bytes()[: newest.stat().st_size // 2])  # e.g. a disk that filled up
    assert ckpt.load_latest(tmp_path)["step"] == 10
    for path in ckpt.list_checkpoints(tmp_path):
        path.write_bytes(b"not a checkpoint")
    assert ckpt.load_latest(tmp_path) is None


def test_rng_capture_restores_every_generator(tmp_path):
    import random

    import numpy as np

    torch.manual_seed(1), np.random.seed(1), random.seed(1)
    ckpt.save(tmp_path, tiny_state(1))
    expected = (torch.rand(3), np.random.rand(3), random.random())
    ckpt.restore_rng(ckpt.load_latest(tmp_path)["rng"])
    got = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(expected[0], got[0]) and (expected[1] == got[1]).all() and expected[2] == got[2]


def test_resume_command_quotes_what_the_shell_would_expand(tmp_path):
    command = ckpt.resume_command(tmp_path / "my run")
    assert command == f"normexp train resume=true 'hydra.run.dir={tmp_path / 'my run'}'"


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_atomic_writes_get_the_permissions_of_a_plain_write(tmp_path, umask, mode):
    """summary.json is written through a private temp file; the result must still be readable
    as the umask allows, like any file the user writes (others on a cluster read reports)."""
    from normexp.data.files import atomic_write_bytes

    old = os.umask(umask)
    try:
        atomic_write_bytes(tmp_path / "summary.json", b"{}\n")
        (tmp_path / "plain.json").write_bytes(b"{}\n")
    finally:
        os.umask(old)
    assert (tmp_path / "summary.json").stat().st_mode & 0o777 == mode
    assert (tmp_path / "plain.json").stat().st_mode & 0o777 == mode
    assert (tmp_path / "summary.json").read_bytes() == b"{}\n"


def test_a_checkpoint_from_before_the_reference_batch_rename_resumes_its_model_update(tmp_path, monkeypatch):
    """Checkpoints written before the model update's batch was renamed keep h₀ as "probe_h0";
    newer ones under "instruments". Resuming an old one restores its h₀ (doubled here, so it
    cannot be mistaken for the h₀ the resumed run computes at its own start)."""
    from normexp.config.compose import compose_config
    from normexp.train.config import TrainConfig
    from normexp.train.loop import Hooks, Trainer

    monkeypatch.setenv("NORMEXP_CACHE", str(tmp_path / "cache"))
    corpus = make_corpus(tmp_path / "corpus.txt", n_bytes=20_000)
    overrides = [*TINY, "data=text", f"data.files=[{corpus}]", "steps=4", "log.progress=off", "checkpoint_every=2"]
    run = tmp_path / "run"
    run.mkdir()
    threads = torch.get_num_threads()

    def closed(trainer):
        trainer.writer.close()
        trainer.progress.close()
        return trainer

    try:
        first = Trainer(TrainConfig.from_composed(compose_config(overrides)), run, Hooks())
        h0 = first.instruments.reference_h0.clone()
        for _ in range(2):
            first.train_step()
            first.after_step()  # the step-2 checkpoint
        closed(first)
        (path,) = ckpt.list_checkpoints(run)
        state = torch.load(path, weights_only=False)
        assert torch.equal(state["instruments"]["reference_h0"], h0)
        state["probe_h0"] = 2 * state.pop("instruments")["reference_h0"]  # the old layout
        torch.save(state, path)
        resumed = closed(Trainer(TrainConfig.from_composed(compose_config([*overrides, "resume=true"])), run, Hooks()))
    finally:
        torch.set_num_threads(threads)
    assert resumed.step == 2 and torch.equal(resumed.instruments.reference_h0, 2 * h0)
