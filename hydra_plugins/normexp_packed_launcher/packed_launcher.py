"""Hydra's launchers for packs: `hydra/launcher=packed` (this machine's device) and
`hydra/launcher=slurm_packed` (each pack one SLURM job). normexp/launch/packs.py says what a pack
is; these classes are what Hydra instantiates (its plugins must live under hydra_plugins)."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from hydra_plugins.hydra_submitit_launcher import submitit_launcher  # a module: its classes are not registered twice
from omegaconf import DictConfig, open_dict

from normexp.config.checks import ConfigError
from normexp.launch.exits import fail
from normexp.launch.packs import HoldPrepared, Member, cannot_pack, member_logs, pack_key, pack_sizes, prepared

log = logging.getLogger("normexp")


class PackedLauncher(Launcher):
    """Hydra's launcher for packs; `max_members` (hydra.launcher.max_members): the largest pack,
    or `auto` (as many as fit in the device's free memory, at most 64); `cuda_graph`
    (hydra.launcher.cuda_graph): plain steps as a CUDA graph, `auto` = where it is correct."""

    def __init__(self, max_members: int | str = "auto", cuda_graph: bool | str = "auto") -> None:
        super().__init__()
        self.max_members = max_members
        self.cuda_graph = None if cuda_graph == "auto" else bool(cuda_graph)
        self.config: DictConfig | None = None
        self.hydra_context: HydraContext | None = None
        self.task_function: TaskFunction | None = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig) -> None:
        self.config, self.hydra_context, self.task_function = config, hydra_context, task_function

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        setup_globals()
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        configs = job_configs(self.hydra_context, self.config, job_overrides, initial_job_idx)
        packs, alone = packs_of(configs, self.max_members)
        if packs and self._on_cpu(configs[packs[0][0]]):
            log.info("normexp: on a CPU a pack trains no faster than its runs one after another (docs/speed.md#packs); "
                     "hydra/launcher=joblib uses every core")
        returns: list[JobReturn | None] = [None] * len(configs)
        for pack in packs:
            for i, ret in zip(pack, run_pack(self.hydra_context, self.config, [configs[i] for i in pack], self.cuda_graph)):
                returns[i] = ret
        for i in alone:  # a solo job, as the basic launcher runs it
            returns[i] = run_alone(self.hydra_context, self.config, self.task_function, configs[i])
        return returns

    @staticmethod
    def _on_cpu(config: DictConfig) -> bool:
        from normexp.train.loop import select_device  # imports torch, as training does next

        return select_device(str(config.device)).type == "cpu"


class PackedSlurmLauncher(submitit_launcher.SlurmLauncher):
    """Packs on a SLURM cluster (`hydra/launcher=slurm_packed`): the sweep's jobs grouped as the
    packed launcher groups them (on the login node, before anything is submitted), and each pack
    (or job that cannot be packed) submitted as one SLURM job, a task of one job array, holding
    the resources the config asks for. Its members train as one pack on the node. SLURM's
    warning before a time limit or a preemption (SIGUSR2) checkpoints every running member
    ("requeued"); submitit requeues the pack, and the requeued job resumes every member from its
    checkpoint (members that had finished are skipped). `max_members`: the largest pack, `auto`:
    as many as fit in the job's `mem_gb` (at most 64); `cuda_graph` as the packed launcher's."""

    def __init__(self, max_members: int | str = "auto", cuda_graph: bool | str = "auto", **submitit_params) -> None:
        super().__init__(**submitit_params)
        self.max_members = max_members
        self.cuda_graph = None if cuda_graph == "auto" else bool(cuda_graph)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        import submitit

        configs = job_configs(self.hydra_context, self.config, job_overrides, initial_job_idx)
        mem_gb = self.params.get("mem_gb")
        packs, alone = packs_of(configs, self.max_members, None if mem_gb is None else int(mem_gb * 2**30))
        units = packs + [[i] for i in alone]
        Path(str(self.config.hydra.sweep.dir)).mkdir(parents=True, exist_ok=True)
        settings = {k: v for k, v in self.params.items() if k not in ("submitit_folder", "max_num_timeout")}
        executor = submitit.AutoExecutor(folder=self.params["submitit_folder"], cluster="slurm",
                                         slurm_max_num_timeout=self.params.get("max_num_timeout", 0))
        executor.update_parameters(**{k if k in SUBMITIT_SHARED_KEYS else f"slurm_{k}": v for k, v in settings.items()})
        log.info("normexp: %d SLURM job%s, one per pack (sweep folder %s)", len(units), "" if len(units) == 1 else "s",
                 self.config.hydra.sweep.dir)
        jobs = executor.map_array(self, [[list(job_overrides[i]) for i in unit] for unit in units],
                                  [[initial_job_idx + i for i in unit] for unit in units],
                                  [Singleton.get_state()] * len(units))
        returns: list[JobReturn | None] = [None] * len(configs)
        for unit, job in zip(units, jobs):
            for i, ret in zip(unit, job.results()[0]):
                returns[i] = ret
        return returns

    def __call__(self, member_overrides: list[list[str]], job_nums: list[int], singleton_state) -> list[JobReturn]:
        """On the node: the pack's members set up and trained together (one job that cannot be
        packed: run as a solo job). A requeued job (SLURM_RESTART_COUNT > 0) resumes them all."""
        import submitit

        Singleton.set_state(singleton_state)
        setup_globals()
        restarted = int(os.environ.get("SLURM_RESTART_COUNT") or 0) > 0
        configs = []
        for overrides, num in zip(member_overrides, job_nums):
            config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(config):
                config.hydra.job.id = f"{submitit.JobEnvironment().job_id}_{num}"
                config.hydra.job.num = num
                if restarted:  # each member from its checkpoint; a member that had finished is skipped
                    config.resume = True
            configs.append(config)
        if len(configs) == 1 and cannot_pack(configs[0]) is not None:
            return [run_alone(self.hydra_context, self.config, self.task_function, configs[0])]
        return run_pack(self.hydra_context, self.config, configs, self.cuda_graph)


# the settings submitit's executors share by name; the others of the slurm launcher's config are slurm_X
SUBMITIT_SHARED_KEYS = frozenset({"timeout_min", "cpus_per_task", "gpus_per_node", "tasks_per_node", "mem_gb",
                                  "nodes", "name", "stderr_to_stdout"})


def job_configs(hydra_context: HydraContext, config: DictConfig, job_overrides: Sequence[Sequence[str]],
                initial_job_idx: int) -> list[DictConfig]:
    """Each job's composed config, its job number set."""
    configs = []
    for idx, overrides in enumerate(job_overrides):
        job_config = hydra_context.config_loader.load_sweep_config(config, list(overrides))
        with open_dict(job_config):
            job_config.hydra.job.id = job_config.hydra.job.num = initial_job_idx + idx
        configs.append(job_config)
    return configs


def packs_of(configs: list[DictConfig], max_members, free_bytes: int | None = None) -> tuple[list[list[int]], list[int]]:
    """The jobs (positions in `configs`) grouped into packs of one shape, at most `max_members`
    each (launch/packs.py's pack_key and pack_sizes; `free_bytes`: the memory a pack may use,
    None = this machine's device's), and the jobs that cannot be packed. A size that does not
    fit is refused in one line, before anything trains."""
    groups: dict[str, list[int]] = {}
    alone = []
    for i, c in enumerate(configs):
        why = cannot_pack(c)
        if why is not None:
            log.info("normexp: job #%d runs alone (it cannot be packed: %s)", c.hydra.job.num, why)
            alone.append(i)
        else:
            groups.setdefault(pack_key(c), []).append(i)
    packs = []
    for indices in groups.values():
        try:
            sizes = pack_sizes(len(indices), max_members, configs[indices[0]], free_bytes)
        except ConfigError as e:
            fail(str(e))
        for size in sizes:
            packs.append(indices[:size])
            indices = indices[size:]
    log.info("normexp: %d jobs in %d pack%s (%s members)%s", len(configs), len(packs), "" if len(packs) == 1 else "s",
             ", ".join(str(len(p)) for p in packs) or "no", f", {len(alone)} alone" if alone else "")
    return packs, alone


def run_alone(hydra_context: HydraContext, config: DictConfig, task_function: TaskFunction,
              job_config: DictConfig) -> JobReturn:
    """A job that cannot be packed, run as the basic launcher runs it."""
    ret = run_job(hydra_context=hydra_context, task_function=task_function, config=job_config,
                  job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    return ret


def set_up(hydra_context: HydraContext, config: DictConfig, job_config: DictConfig) -> tuple[JobReturn, object | None, list[str]]:
    """The job set up as a solo job would be, up to its training (`hydra_task(cfg,
    prepare_only=True)`, through Hydra's run_job: its folder, .hydra files, train.log,
    callbacks): (its JobReturn, its PreparedJob if it is to train, the log files Hydra
    opened for it). Its end is held back until its pack has trained (HoldPrepared)."""
    from normexp.launch.job import hydra_task

    context = HydraContext(config_loader=hydra_context.config_loader, callbacks=HoldPrepared(hydra_context.callbacks))
    ret = run_job(hydra_context=context, task_function=functools.partial(hydra_task, prepare_only=True),
                  config=job_config, job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
    files = [h.baseFilename for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    configure_log(config.hydra.hydra_logging, config.hydra.verbose)
    return ret, prepared(ret), files


def run_pack(hydra_context: HydraContext, config: DictConfig, configs: list[DictConfig],
             cuda_graph: bool | None) -> list[JobReturn]:
    """One pack: each job set up as a solo job (`set_up`), those to train trained together
    (train.pack.train_pack), each job's end reported to Hydra's callbacks as a solo job's is.
    Returns the jobs' JobReturns, in order. A stop signal ends the process (after every member
    recorded its stop); SLURM's preemption warning is handed on to submitit, which requeues."""
    from normexp.launch.sweep import job_label
    from normexp.train.pack import train_pack
    from normexp.train.signals import Interrupted, Preempted, StopSignals

    returns: list[JobReturn | None] = [None] * len(configs)
    members = []
    for index, job_config in enumerate(configs):
        ret, job, files = set_up(hydra_context, config, job_config)
        if job is None:  # refused, failed, or finished already: it ended as a solo job ends
            returns[index] = ret
            continue
        members.append(Member(index, job.cfg, job.run_dir, job.job, files, ret))
    if not members:
        return returns
    labels = [job_label(configs[m.index].hydra) for m in members]
    stop = StopSignals(on_hard_stop=lambda signum: hard_stop(members, signum, stop.grace))
    with member_logs(members, labels):
        try:
            with stop:
                summaries = train_pack([m.config for m in members], [m.run_dir for m in members], stop=stop,
                                       jobs=[m.job for m in members], cuda_graph=cuda_graph)
        except Interrupted as e:
            if isinstance(e, Preempted):  # submitit's handler requeues the pack and exits
                stop.forward(e.signum)
            raise SystemExit(e.exit_code)
        except Exception as e:  # noqa: BLE001 - the sweep goes on past one broken pack
            from normexp.launch.exits import describe_error
            from normexp.launch.job_status import leave_resumable

            message, code = describe_error(e)
            log.error("pack failed: %s (the sweep goes on)", message)
            full = os.environ.get("HYDRA_FULL_ERROR") == "1"
            for m in members:
                leave_resumable(m.run_dir, m.config, None, message, code)
                # as a failed solo job ends (launch.job.hydra_task): returned without a summary, so the
                # sweep counts it failed and goes on to its closing line; a FAILED status would make
                # Hydra's sweeper raise it again, with its traceback (kept for HYDRA_FULL_ERROR=1)
                m.job_return.status = JobStatus.FAILED if full else JobStatus.COMPLETED
                m.job_return.return_value = e if full else None
            summaries = [None] * len(members)
    for m, summary in zip(members, summaries):
        if summary is not None:
            m.job_return.return_value = summary
        returns[m.index] = m.job_return
        hydra_context.callbacks.on_job_end(config=configs[m.index], job_return=m.job_return)
    return returns


def hard_stop(members: list[Member], signum: int, grace: float) -> None:
    """A pack stopped at once (a second signal, or no step boundary within the grace): every
    member recorded "interrupted" at its newest checkpoint, with the line that resumes it in its
    own log (as a solo job's hard stop, launch/job_status.mark_interrupted). Runs on the stop
    watchdog's thread just before the process exits; one member's failure does not skip the rest."""
    from normexp.launch.job_status import mark_interrupted
    from normexp.train.loop import as_member

    for i, m in enumerate(members):
        with as_member(i):
            try:
                mark_interrupted(m.run_dir, signum, grace=grace)
            except Exception as e:  # noqa: BLE001 - the others are still recorded
                log.error("could not record %s as interrupted: %s", m.run_dir, e)
