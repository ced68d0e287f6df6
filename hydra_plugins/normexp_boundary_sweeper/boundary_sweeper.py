"""`hydra/sweeper=boundary`: normexp's boundary search (normexp/analysis/boundary.py) as a Hydra sweeper,
so every launcher (basic, joblib, SLURM) runs its rounds and `resume=true` continues it.

    normexp train -m hydra/sweeper=boundary placement=post,pre seed=0,1,2 \\
        hydra.sweeper.key=lr hydra.sweeper.lower=1e-4 hydra.sweeper.upper=0.1

Every swept key but `seed` spans the settings; `seed` gives the replicates; the searched key
(`key`) must not be swept itself. Two schedules (`schedule`):

    async   (default) runs start as slots free up, across settings, with no round-wide
            barrier; seed 0 of a point runs first and decides it alone where the rule allows
            (normexp.launch.boundary_schedule.Scheduler); the largest `layers` first. A launcher's `launch`
            blocks until its batch is done, so each run is its own one-job launch call, made
            from `parallel` threads at once (default: the launcher's n_jobs, else 1: inline).
    rounds  each round launches the next point of every unfinished setting × every seed as
            one batch and waits for all of it (the schedule before issue 31).

`max_hours` (async only; default null) ends a piece of a search: no run starts after that many
hours, the runs going finish, and the search stops unfinished, to be continued from its record
(normexp/runs/search_record.py) here or on another machine.

`budget_check` = N (default 0: off) reruns, once a setting's search is done, each edge's first
failing point with every seed at N× `steps` and N× `warmup` (the schedule's decay runs to the
last step, so the lr schedule keeps its shape): an edge whose failures learn there is "too
slow for the budget", never a stability limit (boundary.csv's upper_budget / lower_budget).

After each run (async) or round, the searches so far go to boundary_progress.csv and
boundary_points_progress.csv in the sweep folder; when every search is done, to boundary.csv and
boundary_points.csv (`normexp report` reads them, or the progress files of a sweep not yet
finished), and the progress files are removed. A resumed sweep knows only the points it has
replayed so far, so it never writes over a finished sweep's tables before it has finished
itself. At the end boundary_schedule.json holds the runs, wall and busy seconds and the busy
fraction (busy / (slots × wall)).
"""


import itertools
import json
import logging
import signal
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus
from hydra.plugins.sweeper import Sweeper
from omegaconf import OmegaConf

from normexp.analysis import boundary
from normexp.launch import boundary_schedule
from normexp.train.signals import pending_signal

log = logging.getLogger("normexp")


@dataclass
class BoundarySweeperConf:
    _target_: str = "hydra_plugins.normexp_boundary_sweeper.boundary_sweeper.BoundarySweeper"
    key: str = "lr"               # the key searched: lr or layers (log scale)
    lower: Any = 1.0e-4           # the bracket to search in, both probed first
    upper: Any = 1.0e-1
    ratio: float = 1.25           # stop when first unstable / last stable <= ratio
    initial_points: int = 4       # log-spaced points of round 0, the bounds included
    lower_ratio: Optional[float] = None  # the lower edge (too slow .. learns) to this ratio; null = ratio
    schedule: str = "async"       # async (runs as slots free up, seed 0 first) | rounds (one batch a round)
    parallel: Optional[int] = None  # runs at once under async; null = n_jobs / array_parallelism, else 1
    budget_check: int = 0         # N >= 2: rerun each edge's first failing point at N× steps (0 = off)
    max_hours: Optional[float] = None  # async: start no run after this many hours; the ones going finish
    params: Optional[Dict[str, str]] = None  # the other swept keys, as the basic sweeper's params


ConfigStore.instance().store(group="hydra/sweeper", name="boundary", node=BoundarySweeperConf, provider="normexp")


class BoundarySweeper(Sweeper):
    def __init__(self, key: str, lower, upper, ratio: float, initial_points: int,
                 params: Optional[Dict[str, str]] = None, lower_ratio: Optional[float] = None,
                 schedule: str = "async", parallel: Optional[int] = None, budget_check: int = 0,
                 max_hours: Optional[float] = None) -> None:
        super().__init__()
        problem = boundary.check_settings(key, lower, upper, ratio, initial_points, lower_ratio, schedule, parallel,
                                          budget_check, max_hours)
        if problem:
            raise ValueError(problem)
        self.key, self.lower, self.upper, self.ratio = key, lower, upper, ratio
        self.initial_points, self.params = initial_points, dict(params or {})
        self.lower_ratio, self.schedule, self.parallel = lower_ratio, schedule, parallel
        self.budget_check, self.max_hours = budget_check, max_hours
        self.hydra_context = self.config = self.launcher = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def _axes(self, arguments: List[str]) -> "OrderedDict":
        """key -> its values, params first, the command line replacing a key it repeats."""
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        axes: OrderedDict = OrderedDict()
        for o in parser.parse_overrides([*(f"{k}={v}" for k, v in self.params.items()), *arguments]):
            key = o.get_key_element()
            axes[key] = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        if self.key in axes and len(axes[self.key]) > 1:
            raise ValueError(f"{self.key} is what the boundary sweeper searches (between hydra.sweeper.lower and "
                             f"hydra.sweeper.upper); do not sweep it too")
        axes.pop(self.key, None)
        return axes

    def _slots(self) -> int:
        if self.parallel:
            return int(self.parallel)
        from normexp.train.threads import parallel_jobs
        import os

        n_jobs = OmegaConf.select(self.config, "hydra.launcher.n_jobs")
        if n_jobs is not None:  # joblib
            return parallel_jobs(n_jobs, os.cpu_count() or 1)
        array = OmegaConf.select(self.config, "hydra.launcher.array_parallelism")  # submitit (SLURM, local)
        return int(array) if array else 1  # the basic launcher: one at a time, inline

    def sweep(self, arguments: List[str]) -> Any:
        axes = self._axes(arguments)
        seeds = axes.pop("seed", [str(self.config.seed)])
        swept = [k for k, v in axes.items() if len(v) > 1]
        settings = [dict(zip(axes, values)) for values in itertools.product(*axes.values())]
        integer = boundary.SEARCHABLE[self.key]
        searches = [boundary.Search(tuple((k, s[k]) for k in swept), self.lower, self.upper, self.ratio, integer,
                                    lower_ratio=self.lower_ratio, budget_check=self.budget_check)
                    for s in settings]
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        returns, next_idx, lock = [], [0], threading.Lock()
        record = _Record(self, sweep_dir, settings, seeds)

        def overrides(i, x, seed, steps_factor=1):
            values = {**settings[i], self.key: f"{x:g}", "seed": seed}
            if steps_factor > 1:  # a budget check: N× the steps and the warmup, the schedule's shape kept
                for k in ("steps", "warmup"):
                    values[k] = int(float(settings[i].get(k, self.config[k]))) * steps_factor
            return [f"{k}={v}" for k, v in values.items()]

        def launch(batch):
            with lock:  # runs the record holds come back from it, untrained
                known = [record.get(*job) for job in batch]
            todo = [job for job, summary in zip(batch, known) if summary is None]
            if not todo:
                return known
            jobs = [overrides(*job) for job in todo]
            n = len({job[0] for job in todo})
            log.info("boundary search: %d run%s of %d setting%s", len(jobs), "s" * (len(jobs) != 1), n, "s" * (n != 1))
            self.validate_batch_is_legal(jobs)
            with lock:
                first = next_idx[0]
                next_idx[0] += len(jobs)
            results = self.launcher.launch(jobs, initial_job_idx=first)
            summaries = iter([r.return_value if r.status == JobStatus.COMPLETED else None for r in results])
            with lock:
                returns.append(results)
                out = [summary if summary is not None else next(summaries) for summary in known]
                for job, summary in zip(batch, out):
                    record.add(*job, summary=summary)
            return out

        def cost(i, x):
            """A run's relative cost: its depth (a step's time grows with it), the searched depth itself."""
            depth = x if self.key == "layers" else settings[i].get("layers", self.config.get("layers", 1))
            try:
                return float(depth)
            except (TypeError, ValueError):
                return 0.0

        def save_tables():
            with lock:
                boundary.write_tables(searches, self.key, sweep_dir, finished=False)

        first = boundary.initial_points(self.lower, self.upper, self.initial_points, integer)
        schedule = None
        if self.schedule == "rounds":
            rounds = boundary_schedule.search_all(searches, seeds, first, launch, after_round=lambda k: save_tables())
        else:
            rounds = None
            scheduler = boundary_schedule.Scheduler(searches, seeds, first, cost=cost)
            schedule = boundary_schedule.run_scheduled(
                scheduler, lambda job: launch([job])[0], self._slots(), after_run=save_tables,
                stop_after=self.max_hours * 3600 if self.max_hours else None, interrupted=pending_signal)
            schedule["runs_from_record"] = record.served
            (sweep_dir / "boundary_schedule.json").write_text(json.dumps(schedule, indent=2) + "\n")
            if schedule["interrupted"]:  # Ctrl-C: the runs going saved checkpoints; the record holds the rest
                save_tables()
                name = signal.Signals(schedule["interrupted"]).name
                log.warning("boundary search: interrupted by %s; the runs going saved their checkpoints and its %d "
                            "finished runs are in %s: continue it with normexp resume %s", name,
                            len(record.record.runs), record.record.path, sweep_dir)
                raise SystemExit(128 + schedule["interrupted"])
            if schedule["stopped"]:  # a piece of a search: its record and progress tables stand; it continues
                save_tables()
                log.info("boundary search: stopped starting runs after hydra.sweeper.max_hours=%g; its %d finished "
                         "runs are in %s: continue it with normexp resume %s", self.max_hours, len(record.record.runs),
                         record.record.path, sweep_dir)
                return returns
        boundary.write_tables(searches, self.key, sweep_dir)
        for line in boundary.summary_lines(searches, self.key, len(seeds), rounds, schedule):
            log.info("%s", line)
        return returns


class _Record:
    """The sweep's search record (normexp/runs/search_record.py): read when the sweep folder
    holds one (resume=true), else started; a setting's run settings are composed once, when the
    record first needs them (a lookup in a record that holds runs, or its first finished run)."""

    def __init__(self, sweeper: BoundarySweeper, sweep_dir: Path, settings: list, seeds: list) -> None:
        from normexp.runs import search_record

        self.sweeper, self.settings, self.ids, self.composed = sweeper, settings, {}, {}
        self.served = 0  # runs taken from the record
        path = sweep_dir / search_record.RECORD
        cfg = sweeper.config
        if path.exists() or path.is_symlink():
            if OmegaConf.select(cfg, "resume") is not True:
                raise ValueError(f"{sweep_dir} holds a search record ({search_record.RECORD}); pass resume=true to "
                                 "continue that search, or give this one another hydra.sweep.dir")
            self.record = search_record.SearchRecord.read(path)
            self.record.check_command(sweeper.key, [], self._data_files())
            self.record.continue_writing()
            n = len(self.record.runs)
            log.info("boundary search: its record (%s) holds %d finished run%s: they are not run again", path, n,
                     "s" * (n != 1))
        else:
            overrides = OmegaConf.to_container(cfg.hydra.overrides, resolve=False)
            search = {k: getattr(sweeper, k) for k in ("lower", "upper", "ratio", "lower_ratio", "initial_points",
                                                      "budget_check")}
            self.record = search_record.SearchRecord.start(path, {
                "key": sweeper.key, "search": search, "seeds": [str(s) for s in seeds],
                "overrides": {"hydra": list(overrides.get("hydra", [])), "task": list(overrides.get("task", []))},
                "data_files": self._data_files()})

    def _data_files(self) -> list:
        from normexp.runs.record import data_files, file_identity

        return [file_identity(f) for f in data_files(self.sweeper.config.data)]

    def _settings(self, i: int) -> dict:
        from normexp.runs.search_record import run_settings

        if i not in self.composed:
            sweeper = self.sweeper
            job = [*(f"{k}={v}" for k, v in self.settings[i].items()), f"{sweeper.key}={sweeper.lower}"]
            cfg = sweeper.hydra_context.config_loader.load_sweep_config(sweeper.config, job)
            self.composed[i] = run_settings(cfg, sweeper.key)
        return self.composed[i]

    def _id(self, i: int, create: bool) -> Optional[int]:
        if i not in self.ids:
            if not self.record.settings and not create:
                return None
            sid = self.record.setting_of(self._settings(i))
            if sid is None and not create:
                return None
            self.ids[i] = sid if sid is not None else self.record.add_setting(self._settings(i))
        return self.ids[i]

    def get(self, i, x, seed, steps_factor: int = 1) -> Optional[dict]:
        if not self.record.runs:
            return None
        summary = self.record.get(self._id(i, create=False), f"{x:g}", str(seed), steps_factor)
        self.served += summary is not None
        return summary

    def add(self, i, x, seed, steps_factor: int = 1, *, summary) -> None:
        from normexp.runs.schema import FINISHED

        if isinstance(summary, dict) and summary.get("status") in FINISHED:  # a failed job runs again
            self.record.add_run(self._id(i, create=True), f"{x:g}", str(seed), steps_factor, summary)
