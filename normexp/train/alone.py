"""A run alone: `train(cfg, run_dir)`, the one loop (loop.train_runs) over a list of one,
stepped eagerly (loop.Runs: each step the run's own `train_step`) or, on CUDA, as a pack of one
(train/pack.py) whose plain steps replay as one CUDA graph (train/pack_graph.py): the GPU then no
longer waits on Python between a deep narrow model's few thousand small kernels. Logging steps,
evaluations and checkpoints stay the run's own, eager, on its own model. `cuda_graph`
(train.yaml) says auto, true or false; docs/speed.md#cuda-graphs says what it gives."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from omegaconf import DictConfig

from ..config.checks import ConfigError
from ..model.packed import packable
from . import distributed
from .config import TrainConfig
from .loop import Hooks, JobContext, Runs, Trainer, train_runs
from .pack import Pack
from .signals import StopSignals

log = logging.getLogger("normexp")


def train(cfg: DictConfig | TrainConfig, run_dir: Path, stop: StopSignals | None = None, hooks: Hooks | None = None,
          job: JobContext | None = None) -> dict:
    """Train one model as `cfg` says (a checked composed config, read once into a TrainConfig,
    or the TrainConfig), logging into `run_dir`. Returns the summary (also written to
    summary.json). On SIGINT/SIGTERM (see signals.py) it saves a checkpoint, records status
    "interrupted" and raises `Interrupted`. `job`: see JobContext. A run alone is the loop's
    list of one (`loop.train_runs`), stepped as `alone` chooses."""
    return train_runs([cfg], [run_dir], stop, [job or JobContext()], hooks, stepping=alone)[0]


def alone(trainers: Sequence[Trainer]) -> Runs:
    """What steps a run alone (`train`): on CUDA a pack of one whose plain steps replay as
    one CUDA graph (the packed optimizer's step in it; logging steps, evaluations and checkpoints
    eager, the run's own), where the run's `cuda_graph` setting and `graph_refusal` allow; else
    the run's own eager step (loop.Runs). The choice is logged and kept in summary.json
    ("cuda_graph"). `cuda_graph=true` where no graph can be taken stops the run with the reason."""
    wanted = trainers[0].config.cuda_graph
    why = "cuda_graph=false" if wanted is False else graph_refusal(trainers)
    if why is None:
        log.info("plain steps as one CUDA graph (a pack of one; cuda_graph=false steps eagerly)")
        return Pack(trainers, packed_optimizer=True)  # its graph as the run's cuda_graph says
    if wanted is True:
        raise ConfigError("cuda_graph", "true", f"{why}; use cuda_graph=auto (a graph where it can be) or false")
    if trainers[0].device.type == "cuda":
        log.info("plain steps eager, not as a CUDA graph: %s", why)
    return Runs(trainers)


def graph_refusal(trainers: Sequence[Trainer]) -> str | None:
    """Why a run alone cannot step as a graphed pack of one: its settings (RunConfig.cuda_graph_refusal),
    the device it got, a torchrun launch, its model's pack refusal (model/packed.py); None if it can."""
    t = trainers[0]
    why = t.config.cuda_graph_refusal(t.device.type)
    if why is None and distributed.is_distributed():
        why = "a torchrun launch (DDP steps each rank)"
    return why or packable(t.model)
