"""A sweep's progress line, its labelled jobs and its closing summary (issue 41, item 2), and
its jobs' results delivered through Hydra's public Callback API (issue 40, item 3)."""

import io
import json
import re
from pathlib import Path

import pytest
from conftest import TINY, read_summary, run_cli

from normexp.launch import sweep
from normexp.launch.sweep import JOB_RESULTS, JobResult, SweepWatcher, progress_line
from normexp.runs.reading import find_runs


def test_the_progress_line_counts_and_estimates_from_finished_jobs():
    # 3 of 8 done in 90 s: 30 s a job, 5 left -> 150 s
    assert progress_line(3, 1, 8, 90.0) == "sweep 3/8 done, 1 failed, 1:30 elapsed, ETA 2:30"
    assert progress_line(0, 0, 8, 5.0) == "sweep 0/8 done, 0 failed, 0:05 elapsed"  # no job finished: no estimate
    assert progress_line(4, 0, None, 3725.0) == "sweep 4 done, 0 failed, 1:02:05 elapsed"  # boundary: no total


def _leave(folder: Path, result: JobResult) -> None:
    (folder / JOB_RESULTS).mkdir(parents=True, exist_ok=True)
    (folder / JOB_RESULTS / f"{result.num:06d}.json").write_text(json.dumps(result.__dict__))


def test_the_watcher_writes_a_line_per_finished_job_into_a_file(tmp_path):
    stream = io.StringIO()  # not a terminal: one line per finished job, nothing redrawn
    watcher = SweepWatcher(tmp_path, total=3, stream=stream, every=3600)
    watcher.begin()
    _leave(tmp_path, JobResult(1, "#1 seed=1", False, "failed"))
    watcher.poll()
    _leave(tmp_path, JobResult(0, "#0 seed=0", True, "completed"))
    (tmp_path / JOB_RESULTS / ".000002.json.123").write_text("{")  # a result being written: not read
    watcher.poll()
    watcher.poll()  # nothing new: no line
    watcher.end()
    lines = stream.getvalue().splitlines()
    assert lines[0] == f"sweep of 3 jobs in {tmp_path}"
    assert [re.sub(r"\d+:\d\d elapsed(, ETA \d+:\d\d)?", "T", ln) for ln in lines[1:]] == [
        "sweep 1/3 done, 1 failed, T (#1 seed=1: failed)", "sweep 2/3 done, 1 failed, T (#0 seed=0: completed)"]
    assert "\r" not in stream.getvalue()


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_on_a_terminal_the_watcher_redraws_one_line(tmp_path):
    stream = _Terminal()
    watcher = SweepWatcher(tmp_path, total=2, stream=stream, every=3600)
    watcher.begin()
    _leave(tmp_path, JobResult(0, "#0 seed=0", True, "completed"))
    watcher.poll()
    watcher.end()
    text = stream.getvalue()
    after_start = text.split("\n", 1)[1]
    assert after_start.count("\n") == 1 and after_start.endswith("\n")  # the last state stays, one line
    assert after_start.count("\r\033[K") == 2 and "sweep 1/2 done, 0 failed" in after_start


def test_the_closing_line_names_the_report_command(tmp_path):
    outcome = sweep.SweepOutcome(tmp_path, [JobResult(0, "#0", True, "completed"), JobResult(1, "#1", True, "diverged"),
                                            JobResult(2, "#2", False, "failed"), JobResult(3, "#3", True, "completed")],
                                 65.2)
    assert sweep.closing_line(outcome) == (f"normexp: sweep finished: 4 jobs (2 completed, 1 diverged, 1 failed) in "
                                           f"1:05; compare them with: normexp report {tmp_path}")


SMALL = [*TINY, "steps=6", "log_every=3", "eval_every=6", "eval_batches=1"]
LINE = re.compile(r"^sweep (\d)/4 done, (\d) failed, (\d+):(\d\d) elapsed, ETA (\d+):(\d\d) \((#\d [^:]+): (\w+)\)$")


@pytest.mark.slow
def test_a_joblib_sweep_shows_one_progress_line_labelled_jobs_and_a_closing_summary(tmp_path, corpus, cli_env):
    """Four jobs on two joblib workers, two of which fail (lr=-1, impossible): a line per
    finished job with the counts so far and the estimate from the finished jobs, each job's
    console lines under its label, and the closing line naming `normexp report`."""
    folder = tmp_path / "sweep"
    proc = run_cli(["train", "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "data=text",
                    f"data.files=[{corpus}]", *SMALL, "seed=0,1", "lr=0.001,-1", f"hydra.sweep.dir={folder}"],
                   cli_env, check=False)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 0, proc.stderr[-3000:]  # some jobs ran to the end
    assert f"sweep of 4 jobs in {folder}" in lines
    progress = [LINE.match(ln) for ln in lines if ln.startswith("sweep ") and " done, " in ln]
    assert all(progress), [ln for ln in lines if ln.startswith("sweep ")]
    assert [int(m[1]) for m in progress] == [1, 2, 3, 4]  # one line per finished job
    # each job's folder name holds its overrides, sorted: lr=L,...,seed=S
    statuses = {",".join(p for p in run.name.split(",") if p.startswith(("lr=", "seed="))):
                read_summary(run)["status"] for run in find_runs(folder)}
    jobs = {f"#{i} seed={s} lr={lr}": f"lr={lr},seed={s}" for i, (s, lr) in
            enumerate([(0, "0.001"), (0, -1), (1, "0.001"), (1, -1)])}  # Hydra's numbering: the last key varies fastest
    assert sorted(m[7] for m in progress) == sorted(jobs)
    failed = 0
    for m in progress:
        done, label, status = int(m[1]), m[7], m[8]
        assert status == statuses[jobs[label]]
        failed += status == "failed"
        assert int(m[2]) == failed
        elapsed, eta = int(m[3]) * 60 + int(m[4]), int(m[5]) * 60 + int(m[6])
        # the estimate: the time per finished job times the jobs left (elapsed is printed rounded)
        slack = 0.5 * (4 - done) / done + 1
        assert abs(eta - elapsed / done * (4 - done)) <= slack, m[0]
    assert failed == 2 and sorted(statuses.values()).count("failed") == 2
    # every console line of a job carries its label; the two jobs that trained logged step 0
    for label in jobs:
        if statuses[jobs[label]] != "failed":
            assert any(re.match(rf"^\[[\d:]+\] {re.escape(label)}  step 0 ", ln) for ln in lines), label
    assert not any(re.match(r"^\[[\d:]+\] step \d", ln) for ln in lines)  # no unlabelled job line
    closing = next(ln for ln in lines if ln.startswith("normexp: sweep finished"))
    counts = ", ".join(f"{list(statuses.values()).count(s)} {s}" for s in sorted(set(statuses.values())))
    assert re.fullmatch(rf"normexp: sweep finished: 4 jobs \({counts}\) in \d+:\d\d; compare them with: "
                        rf"normexp report {re.escape(str(folder))}", closing), closing
    assert lines[-1] == "normexp: 2 of 4 jobs of the sweep failed (each job's error is above and in its train.log)"


@pytest.mark.slow
def test_the_callback_delivers_the_results_the_launcher_returned(tmp_path, corpus, monkeypatch):
    """What run_hydra returns (the jobs' results, through sweep.SweepCallback's files) says of
    each job what Hydra's JobReturn says: a test callback keeps the very JobReturn objects the
    basic launcher returns (Hydra hands each to on_job_end before returning it)."""
    from normexp.launch.hydra_job import run_hydra
    from normexp.launch.plan import LaunchPlan

    monkeypatch.setenv("NORMEXP_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    KeptReturns.returns.clear()
    plan = LaunchPlan.parse(["-m", "data=text", f"data.files=[{corpus}]", *SMALL, "steps=2", "seed=0",
                             "lr=0.001,-1", f"hydra.sweep.dir={tmp_path / 'sweep'}",
                             f"+hydra.callbacks.kept._target_={__name__}.KeptReturns"])
    outcome = run_hydra(plan)
    from hydra.core.utils import JobStatus

    expected = [(int(r.hydra_cfg.hydra.job.num), r.status == JobStatus.COMPLETED and r.return_value is not None)
                for r in KeptReturns.returns]
    assert [(r.num, r.ok) for r in outcome.results] == sorted(expected) == [(0, True), (1, False)]
    assert outcome.results[0].status == KeptReturns.returns[0].return_value["status"]
    assert outcome.folder == tmp_path / "sweep"


from hydra.experimental.callback import Callback  # noqa: E402 - the test callback's base, next to it


class KeptReturns(Callback):
    returns: list = []

    def on_job_end(self, config, job_return, **kwargs):
        KeptReturns.returns.append(job_return)


def test_a_jobs_console_lines_carry_its_label_and_its_log_file_does_not(tmp_path):
    """Parallel jobs share the console: their lines there start with the job's label; its
    train.log is its own and stays plain. A reused worker's next job replaces the label."""
    import logging

    from normexp.launch.console import label_console

    console, plain = io.StringIO(), logging.Formatter("[t] %(message)s")
    handlers = [logging.StreamHandler(console), logging.FileHandler(tmp_path / "train.log")]
    for h in handlers:
        h.setFormatter(plain)
    root = logging.getLogger()
    saved, level = root.handlers[:], root.level
    # setLevel, not `.level =`: it clears the loggers' isEnabledFor cache, which an earlier test
    # may have filled while the root logger was at WARNING (then "normexp" would drop INFO here)
    root.handlers = handlers
    root.setLevel(logging.INFO)
    try:
        label_console("#1 seed=1")
        logging.getLogger("normexp").info("step %d", 3)
        label_console("#2 seed=2")
        logging.getLogger("normexp").info("done")
    finally:
        root.handlers = saved
        root.setLevel(level)
        handlers[1].close()
    assert console.getvalue().splitlines() == ["[t] #1 seed=1  step 3", "[t] #2 seed=2  done"]
    assert (tmp_path / "train.log").read_text().splitlines() == ["[t] step 3", "[t] done"]
