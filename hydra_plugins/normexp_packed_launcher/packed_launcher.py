"""Hydra's launcher for packs (`hydra/launcher=packed`): normexp/launch/packs.py says what a pack
is; this class is what Hydra instantiates (its plugins must live under hydra_plugins)."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus, configure_log, run_job, setup_globals
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, open_dict

from normexp.config.checks import ConfigError
from normexp.launch.exits import fail
from normexp.launch.packs import DEFERRED, Member, _HoldDeferred, cannot_pack, member_logs, pack_key, pack_sizes

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
        configs = []
        for idx, overrides in enumerate(job_overrides):
            job_config = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
            with open_dict(job_config):
                job_config.hydra.job.id = job_config.hydra.job.num = initial_job_idx + idx
            configs.append(job_config)
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
                sizes = pack_sizes(len(indices), self.max_members, configs[indices[0]])
            except ConfigError as e:  # refused before anything trains, in one line
                fail(str(e))
            for size in sizes:
                packs.append(indices[:size])
                indices = indices[size:]
        log.info("normexp: %d jobs in %d pack%s (%s members)%s", len(configs), len(packs), "" if len(packs) == 1 else "s",
                 ", ".join(str(len(p)) for p in packs) or "no", f", {len(alone)} alone" if alone else "")
        if packs and self._on_cpu(configs[packs[0][0]]):
            log.info("normexp: on a CPU a pack trains no faster than its runs one after another (docs/speed.md#packs); "
                     "hydra/launcher=joblib uses every core")
        returns: list[JobReturn | None] = [None] * len(configs)
        for pack in packs:
            self._run_pack([configs[i] for i in pack], pack, returns)
        for i in alone:  # a solo job, as the basic launcher runs it
            returns[i] = run_job(hydra_context=self.hydra_context, task_function=self.task_function, config=configs[i],
                                 job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
            configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return returns

    @staticmethod
    def _on_cpu(config: DictConfig) -> bool:
        from normexp.train.loop import select_device  # imports torch, as training does next

        return select_device(str(config.device)).type == "cpu"

    def _set_up(self, config: DictConfig, index: int) -> tuple[JobReturn, tuple | None, list[str]]:
        """The job set up as a solo job would be, its training deferred: (its JobReturn, (cfg,
        run_dir, JobContext) if it is to train, the log files Hydra opened for it)."""
        from normexp.train import loop

        held: list = []
        context = HydraContext(config_loader=self.hydra_context.config_loader,
                               callbacks=_HoldDeferred(self.hydra_context.callbacks))

        def defer(cfg, run_dir, job):
            held.append((cfg, run_dir, job))
            return DEFERRED

        loop.deferred_training = defer
        try:
            ret = run_job(hydra_context=context, task_function=self.task_function, config=config,
                          job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
        finally:
            loop.deferred_training = None
        files = [h.baseFilename for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return ret, (held[0] if held and ret.status == JobStatus.COMPLETED else None), files

    def _run_pack(self, configs: list[DictConfig], indices: list[int], returns: list) -> None:
        from normexp.train.pack import train_pack
        from normexp.train.signals import Interrupted, StopSignals
        from normexp.launch.sweep import job_label

        members = []
        for config, index in zip(configs, indices):
            ret, held, files = self._set_up(config, index)
            if held is None:  # refused, failed, or finished already: it ended as a solo job ends
                returns[index] = ret
                continue
            cfg, run_dir, job = held
            members.append(Member(index, cfg, run_dir, job, files, ret))
        if not members:
            return
        labels = [job_label(configs[indices.index(m.index)].hydra) for m in members]
        stop = StopSignals(on_hard_stop=lambda signum: hard_stop(members, signum, stop.grace))
        with member_logs(members, labels):
            try:
                with stop:
                    summaries = train_pack([m.config for m in members], [m.run_dir for m in members], stop=stop,
                                           jobs=[m.job for m in members], cuda_graph=self.cuda_graph)
            except Interrupted as e:
                raise SystemExit(e.exit_code)
            except Exception as e:  # noqa: BLE001 - the sweep goes on past one broken pack
                from normexp.launch.exits import describe_error
                from normexp.launch.job_status import leave_resumable

                message, code = describe_error(e)
                log.error("pack failed: %s (the sweep goes on)", message)
                for m in members:
                    leave_resumable(m.run_dir, m.config, None, message, code)
                    # as a failed solo job ends (launch.job.hydra_task): returned without a summary, so the
                    # sweep counts it failed and goes on to its closing line; a FAILED status would make
                    # Hydra's sweeper raise it again, with its traceback (kept for HYDRA_FULL_ERROR=1)
                    full = os.environ.get("HYDRA_FULL_ERROR") == "1"
                    m.job_return.status = JobStatus.FAILED if full else JobStatus.COMPLETED
                    m.job_return._return_value = e if full else None
                    returns[m.index] = m.job_return
                    self.hydra_context.callbacks.on_job_end(config=configs[indices.index(m.index)], job_return=m.job_return)
                return
        for m, summary in zip(members, summaries):
            m.job_return._return_value = summary
            returns[m.index] = m.job_return
            self.hydra_context.callbacks.on_job_end(config=configs[indices.index(m.index)], job_return=m.job_return)


def hard_stop(members: list[Member], signum: int, grace: float) -> None:
    """A pack stopped at once (a second signal, or no step boundary within the grace): every
    member recorded "interrupted" at its newest checkpoint, with the line that resumes it in its
    own log (as a solo job's hard stop, launch/job_status.mark_interrupted). Runs on the stop
    watchdog's thread just before the process exits; one member's failure does not skip the rest."""
    from normexp.launch.job_status import mark_interrupted
    from normexp.train.pack import as_member

    for i, m in enumerate(members):
        with as_member(i):
            try:
                mark_interrupted(m.run_dir, signum, grace=grace)
            except Exception as e:  # noqa: BLE001 - the others are still recorded
                log.error("could not record %s as interrupted: %s", m.run_dir, e)
