"""A sweep seen from the command that launched it, through Hydra's public Callback API
(registered in configs/train.yaml as hydra.callbacks.normexp_sweep):

- each job, when it ends, leaves its result (JobResult) in the sweep folder's .normexp_jobs/,
  in the job's own process: any launcher (inline, joblib workers, submitit and SLURM jobs);
- the launching process watches that folder (SweepWatcher) and keeps one line for the whole
  sweep: jobs done of all, failed, elapsed, and the time left estimated from the finished jobs;
- when the sweep ends, the results are what `run_hydra` returns (`finished_sweep`), and
  `closing_line` names `normexp report <folder>`.

The jobs' results go through files, not the launchers' return values, because hydra.main
drops those and the boundary sweeper's rounds return them to itself."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TextIO

import typer
from hydra.core.utils import JobStatus
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from .exits import fail

# the folder, inside the sweep's, where each job leaves its result (cleared when a sweep starts)
JOB_RESULTS = ".normexp_jobs"


@dataclass(frozen=True)
class JobResult:
    """One job of a sweep as it ended: its number, label (`#3 placement=post warmup=100`),
    whether it ran to its end (`ok`: the job returned its summary; False when it failed or was
    refused), and the run's status (completed, stalled, diverged; "failed" when not ok)."""

    num: int
    label: str
    ok: bool
    status: str


@dataclass(frozen=True)
class SweepOutcome:
    folder: Path
    results: list[JobResult]
    seconds: float


def varied_keys(sweep_dir: Path, sweeper, searched: bool = True) -> set[str]:
    """The keys a sweep varies, read from the multirun.yaml its sweeper wrote first: the swept
    ones (`-m placement=pre,post`, or a preset's hydra.sweeper.params) and (`searched`) the
    boundary sweeper's searched key. Group options count as the group (`placement`)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from ..config.keys import override_key

    try:
        from ..runs.safe_files import read_yaml  # a shared folder's file: no link, bounded, nothing resolved

        typed = read_yaml(Path(sweep_dir), "multirun.yaml")["hydra"]["overrides"]["task"]
        parsed = OverridesParser.create().parse_overrides([str(o) for o in typed])
    except Exception:  # noqa: BLE001 - no readable multirun.yaml
        parsed = []
    keys = {override_key(o.input_line) for o in parsed if o.is_sweep_override()}
    keys |= {str(k) for k in (sweeper.get("params") or {})}
    if searched and "boundary_sweeper" in str(sweeper.get("_target_")):
        keys.add(str(sweeper.key))
    return keys


def job_label(hc: DictConfig) -> str:
    """`#3 placement=post warmup=100`: a sweep job's number and its values of the keys the sweep
    varies. `hc`: the job's hydra node."""
    from ..config.keys import override_key

    varied = varied_keys(Path(str(hc.sweep.dir)), hc.sweeper)
    return " ".join([f"#{hc.job.num}", *(str(o) for o in hc.overrides.task if override_key(str(o)) in varied)])


def planned_jobs(config: DictConfig) -> int | None:
    """How many jobs the sweep runs; None when a sweeper decides as it goes (boundary)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from ..config.compose import sweep_jobs

    sweeper = config.hydra.sweeper
    if "boundary_sweeper" in str(sweeper.get("_target_")):
        return None
    try:
        parsed = OverridesParser.create().parse_overrides([str(o) for o in config.hydra.overrides.task])
        return len(sweep_jobs(parsed, sweeper.get("params")))
    except Exception:  # noqa: BLE001 - a sweeper of another kind: counts only
        return None


def read_results(folder: Path) -> list[JobResult]:
    """The results the jobs of the sweep in `folder` left so far, by job number."""
    results = []
    for path in sorted((Path(folder) / JOB_RESULTS).glob("*.json")):
        try:
            results.append(JobResult(**json.loads(path.read_text())))
        except (OSError, ValueError, TypeError):  # written right now (renamed in whole), or not ours
            continue
    return sorted(results, key=lambda r: r.num)


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def progress_line(done: int, failed: int, total: int | None, elapsed: float) -> str:
    """`sweep 3/6 done, 1 failed, 0:42 elapsed, ETA 0:42`: the time left is the mean time per
    finished job so far (parallel jobs included) times the jobs left."""
    of = f"/{total}" if total is not None else ""
    line = f"sweep {done}{of} done, {failed} failed, {_clock(elapsed)} elapsed"
    if total is not None and done:
        line += f", ETA {_clock(elapsed / done * (total - done))}"
    return line


class SweepWatcher:
    """Polls the sweep folder for finished jobs from the launching process (a launcher like
    joblib's blocks the main thread). On a terminal it redraws one line; into a file or a
    pipe it writes one line per finished job."""

    def __init__(self, folder: Path, total: int | None, stream: TextIO | None = None, every: float = 1.0):
        self.folder, self.total, self.every = Path(folder), total, every
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty()
        self.start = time.monotonic()
        self.seen: dict[int, JobResult] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="normexp-sweep-watcher", daemon=True)

    def begin(self) -> None:
        what = f"{self.total} jobs" if self.total is not None else "jobs chosen as it goes"
        self._write(f"sweep of {what} in {self.folder}", end="\n")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.poll()

    def poll(self) -> None:
        new = [r for r in read_results(self.folder) if r.num not in self.seen]
        for r in new:
            self.seen[r.num] = r
            if not self.tty:
                self._write(f"{self.line()} ({r.label}: {r.status})", end="\n")
        if self.tty:
            self._write(f"\r\033[K{self.line()}", end="\r")

    def line(self) -> str:
        failed = sum(not r.ok for r in self.seen.values())
        return progress_line(len(self.seen), failed, self.total, time.monotonic() - self.start)

    def end(self) -> float:
        """Stop watching (a last look first); the sweep's seconds."""
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join()
            self.poll()
            if self.tty:
                self._write("", end="\n")  # the last state of the line stays on screen
        return time.monotonic() - self.start

    def _write(self, text: str, end: str) -> None:
        try:
            self.stream.write(text + end)
            self.stream.flush()
        except (OSError, ValueError):  # a closed or full stream: the sweep goes on without its line
            pass


_watcher: SweepWatcher | None = None
_outcome: SweepOutcome | None = None
_lock = threading.Lock()


def start_launch() -> None:
    """Forget the previous sweep of this process (run_hydra calls it before Hydra starts)."""
    global _outcome
    stop_watching()
    _outcome = None


def stop_watching() -> None:
    """End the watcher of an unfinished sweep (a job's Ctrl-C ends the sweep without
    on_multirun_end)."""
    global _watcher
    with _lock:
        if _watcher is not None:
            _watcher.end()
            _watcher = None


def finished_sweep() -> SweepOutcome | None:
    """The outcome of the sweep this process launched last, once it has ended; None for a single run."""
    return _outcome


def closing_line(outcome: SweepOutcome) -> str:
    """The sweep's last line: jobs, their statuses, time, and how to compare them."""
    counts: dict[str, int] = {}
    for r in outcome.results:
        counts[r.status] = counts.get(r.status, 0) + 1
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
    return (f"normexp: sweep finished: {len(outcome.results)} jobs ({statuses or 'none ran'}) in "
            f"{_clock(outcome.seconds)}; compare them with: normexp report {outcome.folder}")


def end_of_sweep(outcome: SweepOutcome | None) -> None:
    """The sweep's closing line on stderr (how many jobs, their statuses, `normexp report
    <folder>`), and how many jobs failed; exit 1 when every job of the sweep failed."""
    if outcome is None or not outcome.results:
        return
    typer.echo(closing_line(outcome), err=True)
    results = outcome.results
    failed = [r for r in results if not r.ok]
    if not failed:
        return
    if len(failed) == len(results):
        fail(f"all {len(results)} jobs of the sweep failed (each job's error is above and in its train.log)", code=1)
    typer.echo(f"normexp: {len(failed)} of {len(results)} jobs of the sweep failed (each job's error is above and "
               "in its train.log)", err=True)


class SweepCallback(Callback):
    """Hydra's callbacks for a sweep (hydra.experimental.callback.Callback, configured in
    configs/train.yaml); each method runs where Hydra calls it: on_multirun_* in the launching
    process, on_job_end in the job's (a worker, a SLURM node). Holds no state: Hydra pickles it
    for the launchers' workers."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        global _watcher
        folder = Path(str(config.hydra.sweep.dir))
        results = folder / JOB_RESULTS
        if results.is_dir():  # a resumed or re-run sweep counts its jobs afresh
            for old in results.glob("*.json"):
                old.unlink(missing_ok=True)
        with _lock:
            _watcher = SweepWatcher(folder, planned_jobs(config))
            _watcher.begin()

    def on_job_end(self, config: DictConfig, job_return, **kwargs: Any) -> None:
        hc = config.hydra
        if hc.mode != RunMode.MULTIRUN:
            return
        value = job_return.return_value if job_return.status == JobStatus.COMPLETED else None
        ok = isinstance(value, dict)
        result = JobResult(num=int(hc.job.num), label=job_label(hc), ok=ok,
                           status=str(value.get("status", "completed")) if ok else "failed")
        folder = Path(str(hc.sweep.dir)) / JOB_RESULTS
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{result.num:06d}.json"
        part = path.with_name(f".{path.name}.{os.getpid()}")
        part.write_text(json.dumps(asdict(result)))
        os.replace(part, path)  # the watcher reads a whole file or none

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        global _outcome, _watcher
        with _lock:
            seconds = _watcher.end() if _watcher is not None else 0.0
            _watcher = None
        folder = Path(str(config.hydra.sweep.dir))
        _outcome = SweepOutcome(folder, read_results(folder), seconds)
        shutil.rmtree(folder / JOB_RESULTS, ignore_errors=True)  # bookkeeping: the sweep folder holds only its jobs

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        """A single run: its .hydra files written first here, so that a machine that refuses them (a
        full disk) stops the start in one line (StartRefused) instead of Hydra's traceback; Hydra
        writes the same files again right after."""
        if config.hydra.output_subdir is None:  # torchrun's ranks other than 0 write nothing
            return
        run_dir = Path(os.path.abspath(str(config.hydra.run.dir)))  # as Hydra makes runtime.output_dir
        hydra_dir = run_dir / str(config.hydra.output_subdir)
        task = OmegaConf.masked_copy(config, [k for k in config if k != "hydra"])
        files = {"config.yaml": task, "hydra.yaml": OmegaConf.masked_copy(config, ["hydra"]),
                 "overrides.yaml": config.hydra.overrides.task}
        try:
            hydra_dir.mkdir(parents=True, exist_ok=True)
            for name, content in files.items():  # written as Hydra writes them
                with open(hydra_dir / name, "w", encoding="utf-8") as file:
                    file.write(OmegaConf.to_yaml(content))
        except OSError as e:
            from .exits import environment_refusal

            if environment_refusal(e) is None:
                raise
            raise StartRefused(e, run_dir) from None
        # where to point TensorBoard, from the start; only once the folder took its first files
        print(f"normexp: run folder: {run_dir}", file=sys.stderr, flush=True)


class StartRefused(BaseException):
    """The machine refused a write while a run's folder was set up (a full disk when
    .hydra/config.yaml is written). A BaseException, so that it passes Hydra's report of
    errors (a traceback and exit 1) and its callbacks' (a warning) on its way to run_hydra,
    which says it in one line."""

    def __init__(self, error: OSError, run_dir: Path):
        super().__init__(str(error))
        self.error, self.run_dir = error, run_dir
