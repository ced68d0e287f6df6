"""The settings of one training run as typed objects, built once from the composed config.

    TrainConfig       the run: seed, device, batch, data, checkpoints, ... and its parts:
      ModelConfig     the model's shape, norm, placement and init (model/config.py)
      OptimizerConfig AdamW's settings and clipping              (config/run_config.py, as the
      ScheduleConfig  the learning-rate schedule and its warmup    three below: each with its
      LogConfig       the logging and evaluation cadence           rules, which the pre-flight
      LossSpikeConfig the loss-spike flag's Hampel rule             calls before torch loads)

`TrainConfig.from_composed(cfg)` reads the composed DictConfig (Hydra's, checked by the
pre-flight) once; the Trainer and the functions it calls (train/loop.py) read these objects,
never the DictConfig. It lives here, above model/ and config/, because it holds the model's
settings; its torch-free parts live in config/ so the pre-flight and runs/ can use them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..config.keys import plain
from ..config.run_config import LogConfig, LossSpikeConfig, OptimizerConfig, ScheduleConfig
from ..model.config import ModelConfig


@dataclass(frozen=True)
class TrainConfig:
    """One training run's settings (configs/train.yaml, composed and checked). `composed`: the
    composed config itself, kept as the run's record: the summary's hyperparameters
    (runs.folder.summary_record), the checkpoint's settings (runs.folder.result_settings) and
    TensorBoard's config text are made from it exactly as before, so old run folders compare
    equal; training itself reads only the typed fields."""

    model: ModelConfig     # vocab_size: the tokenizer's; the trainer builds with the corpus's (with_vocab_size)
    optim: OptimizerConfig
    schedule: ScheduleConfig
    log: LogConfig
    loss_spike: LossSpikeConfig
    seed: int
    device: str
    threads: int | str           # a count, or "auto" (train/threads.py)
    compile: bool
    resume: bool
    batch_size: int
    z_loss: float                # c of the auxiliary loss c·(log Z)² (0 = off)
    max_loss: float              # divergence.max_loss: the divergence guard's ceiling
    checkpoint_every: int        # 0 = only at the end
    keep_checkpoints: int
    data: dict                   # the data source's node (data/sources.py)
    tokenizer: dict              # the tokenizer's node
    composed: Mapping            # the composed config (a DictConfig): the run's record, see above

    @classmethod
    def from_composed(cls, cfg) -> "TrainConfig":
        """The typed settings of a composed config (a DictConfig),
        read once. Assumes the pre-flight's checks passed (launch/validate.py)."""
        return cls(model=ModelConfig.from_composed(cfg, vocab_size=cfg["tokenizer"]["vocab_size"]),
                   optim=OptimizerConfig.from_composed(cfg), schedule=ScheduleConfig.from_composed(cfg),
                   log=LogConfig.from_composed(cfg), loss_spike=LossSpikeConfig.from_composed(cfg),
                   seed=cfg.seed, device=str(cfg.device), threads=cfg.threads, compile=cfg.compile,
                   resume=cfg.resume, batch_size=cfg.batch_size, z_loss=cfg.z_loss, max_loss=cfg.divergence.max_loss,
                   checkpoint_every=cfg.checkpoint_every, keep_checkpoints=cfg.keep_checkpoints,
                   data=plain(cfg["data"]), tokenizer=plain(cfg["tokenizer"]), composed=cfg)

    @property
    def steps(self) -> int:
        """Optimizer updates in the run (the schedule's)."""
        return self.schedule.steps

    @property
    def seq_len(self) -> int:
        return self.model.seq_len
