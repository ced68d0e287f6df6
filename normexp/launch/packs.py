"""What the packed launcher (`hydra/launcher=packed`, hydra_plugins/normexp_packed_launcher) stands on: a sweep's jobs of one shape trained together
as one model (train/pack.py), each still a run of its own.

    normexp train -m hydra/launcher=packed lr=1e-3,3e-3,1e-2 seed=0,1,2 placement=post

Jobs go to one pack when they build the same computation (`pack_key`: everything but the
values a member may have of its own, `MEMBER_VALUES`); others go to packs of their own, at most
`max_members` a pack. Each job is set up exactly as a solo job (Hydra's `run_job` with the
job's config: its folder, .hydra files, train.log, normexp's checks, claim and record), except
that it stops before training (`hydra_task(cfg, prepare_only=True)` returns a PreparedJob); then
the pack trains, and each job's result reaches Hydra's callbacks (the sweep's progress line and
closing line) as a solo job's does. Works under -m sweeps, the presets and the boundary
sweeper's rounds (each round one launch).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import DictConfig, OmegaConf

from ..config.checks import ConfigError
from .console import OneLine

log = logging.getLogger("normexp")

# What members of one pack may each have of their own: values the pack's one computation takes
# per member (the optimizer's numbers, the schedule, the data order, the initial weights, the
# loss's extra term, the rules that judge a run), and settings that change how a run is watched
# or kept, not what it computes. Everything else is the pack's key.
MEMBER_VALUES = ("lr", "warmup", "schedule", "seed", "init", "optim", "z_loss", "grad_clip", "divergence",
                 "stall_margin", "outcome", "loss_spike", "log", "log_every", "eval_every", "checkpoint_every",
                 "keep_checkpoints", "resume", "threads")


def pack_key(cfg: DictConfig) -> str:
    """The computation a job builds, as text: jobs with equal keys can share a pack. The init's
    `scale_positions` is in it (it changes the forward), the init's draw is not."""
    from ..config.variants import settings_of

    task = OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True)
    shared = {k: v for k, v in task.items() if k not in MEMBER_VALUES}
    shared["scale_positions"] = bool(settings_of("init", task.get("init")).scale_positions)
    return json.dumps(shared, sort_keys=True, default=str)


def cannot_pack(cfg: DictConfig) -> str | None:
    """Why this job cannot be a member of a pack (config/variants' pack_refusal), in a few words; None if it can."""
    from ..config.variants import pack_refusal

    name = lambda node: node.get("name") if hasattr(node, "get") else str(node)  # noqa: E731
    return pack_refusal(name(cfg.placement), name(cfg.norm), bool(cfg.get("compile")))


def member_memory_bytes(cfg: DictConfig) -> int:
    """One member's memory in a pack: its step's (config/resources.py) and its row of the pack's
    weights and gradients (8 bytes a parameter more)."""
    from ..config.resources import memory_parts

    model, batch = memory_parts(cfg)
    return model + model // 2 + batch


def members_that_fit(cfg: DictConfig, free_bytes: int | None = None) -> int | None:
    """How many members of this shape fit in `free_bytes`, by default the free memory of the
    run's device (the GPU's, where the run uses one); None where it cannot be read."""
    from ..config.resources import available_memory_bytes

    device = str(cfg.get("device", "auto"))
    if free_bytes is None and (device in ("auto", "cuda") or device.startswith("cuda")):
        import torch

        if torch.cuda.is_available():
            free_bytes = torch.cuda.mem_get_info()[0]
    if free_bytes is None:
        free_bytes = available_memory_bytes()
    return None if free_bytes is None else max(0, int(free_bytes * 0.9) // member_memory_bytes(cfg))


def pack_sizes(n: int, max_members: int | str, cfg: DictConfig, free_bytes: int | None = None) -> list[int]:
    """How `n` jobs of one shape split into packs: `max_members` each at most (`auto`: as many as
    fit in `free_bytes`, by default the device's free memory; a SLURM job's mem_gb for
    slurm_packed); an explicit size that does not fit is refused, saying how many would, and a
    shape of which not one member fits is refused whatever the size."""
    fit = members_that_fit(cfg, free_bytes)
    if fit == 0:  # not even one: a "pack" of one would need ~1.5x the memory of the solo run it replaces
        raise ConfigError("hydra.launcher.max_members", max_members,
                          f"not one member of this shape fits in the free memory (a member needs about "
                          f"{member_memory_bytes(cfg) / 2**30:.1f} GiB, the model's memory and half as much again "
                          "for its row of the pack); train these jobs unpacked (hydra/launcher=basic or joblib), "
                          "or choose a smaller shape")
    if max_members == "auto":
        size = max(1, min(n, fit if fit is not None else n, 64))
    else:
        size = int(max_members)
        if size < 1:
            raise ConfigError("hydra.launcher.max_members", max_members, "must be a whole number >= 1, or auto")
        if fit is not None and min(size, n) > fit:
            raise ConfigError("hydra.launcher.max_members", max_members,
                              f"a pack of {min(size, n)} members of this shape needs about "
                              f"{min(size, n) * member_memory_bytes(cfg) / 2**30:.1f} GiB and {fit} fit in the free "
                              f"memory: set hydra.launcher.max_members={max(fit, 1)} (or auto)")
    packs = math.ceil(n / size)
    return [n // packs + (1 if i < n % packs else 0) for i in range(packs)]  # even packs, in job order


class HoldPrepared:
    """Hydra's callbacks, with the end of a job that was only prepared (launch.job.PreparedJob)
    held back: that job ends when its pack does (PackedLauncher reports it then)."""

    def __init__(self, callbacks):
        self.callbacks = callbacks

    def __getattr__(self, name):
        return getattr(self.callbacks, name)

    def on_job_end(self, config, job_return, **kwargs):
        if prepared(job_return) is not None:
            return
        self.callbacks.on_job_end(config=config, job_return=job_return, **kwargs)


def prepared(job_return: JobReturn):
    """The PreparedJob a job set up for a pack returned; None for a job that ended (refused,
    failed, or finished already)."""
    from .job import PreparedJob

    if job_return.status != JobStatus.COMPLETED:
        return None
    value = job_return.return_value
    return value if isinstance(value, PreparedJob) else None


@dataclass
class Member:
    index: int           # the job's position in the launch
    config: DictConfig   # its task config
    run_dir: Path
    job: object          # train.loop.JobContext
    log_files: list[str]
    job_return: JobReturn


class _MemberFilter(logging.Filter):
    """Passes the records of one member (train/loop.py's `current_member`) and the pack's own."""

    def __init__(self, index: int):
        super().__init__()
        self.index = index

    def filter(self, record: logging.LogRecord) -> bool:
        from ..train.loop import current_member

        return current_member.get() in (None, self.index)


class _LabelFilter(logging.Filter):
    """Puts the member's label before its console lines (`#3 lr=0.01  diverged at step 40 ...`)."""

    def __init__(self, labels: list[str]):
        super().__init__()
        self.labels = labels

    def filter(self, record: logging.LogRecord) -> bool:
        from ..train.loop import current_member

        i = current_member.get()
        record.pack_label = self.labels[i] if i is not None else "pack"
        return True


class member_logs:
    """While a pack trains, each member's lines go to its own train.log (the files Hydra opened
    for it) and to the console under its label."""

    def __init__(self, members: list[Member], labels: list[str]):
        self.members, self.labels = members, labels
        self.added: list[logging.Handler] = []

    def __enter__(self):
        root = logging.getLogger()
        for h in [h for h in root.handlers if isinstance(h, logging.FileHandler)]:
            root.removeHandler(h)
            h.close()
        fmt = OneLine("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s")
        for i, m in enumerate(self.members):
            for path in m.log_files:
                handler = logging.FileHandler(path, mode="a")
                handler.setFormatter(fmt)
                handler.addFilter(_MemberFilter(i))
                root.addHandler(handler)
                self.added.append(handler)
        self.label_filter = _LabelFilter(self.labels)
        for h in root.handlers:
            if type(h) is logging.StreamHandler:
                h.addFilter(self.label_filter)
                inner = h.formatter.inner if hasattr(h.formatter, "inner") else h.formatter
                h.setFormatter(_ConsoleLabelled(inner or logging.Formatter()))
        return self

    def __exit__(self, *exc):
        root = logging.getLogger()
        for h in self.added:
            root.removeHandler(h)
            h.close()
        for h in root.handlers:
            h.removeFilter(self.label_filter)
        return False


class _ConsoleLabelled(logging.Formatter):
    """The console formatter's lines with the member's label first."""

    def __init__(self, inner: logging.Formatter):
        super().__init__()
        self.inner = inner

    def format(self, record: logging.LogRecord) -> str:
        labelled = logging.makeLogRecord(record.__dict__)
        labelled.msg, labelled.args = f"{getattr(record, 'pack_label', '')}  {record.getMessage()}", None
        return self.inner.format(labelled)
