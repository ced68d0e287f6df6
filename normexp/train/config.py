"""The settings of one training run as typed objects, built once from the composed config.

    TrainConfig   RunConfig's fields (config/run_config.py: seed, device, batch, data, checkpoints,
                  ... and the optimizer, schedule, logging and loss-spike parts, each with its
                  rules, which the pre-flight calls before torch loads), and
      model       ModelConfig: the model's shape, norm, placement and init (config/model_config.py)

`TrainConfig.from_composed(cfg)` reads the composed DictConfig (Hydra's, checked by the
pre-flight) once; the Trainer and the functions it calls (train/loop.py) read these objects,
never the DictConfig. It lives here, above model/ and config/, because it holds the model's
settings; the rest is torch-free, in config/, so the pre-flight (before torch loads) and runs/
can use it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.run_config import RunConfig
from ..config.model_config import ModelConfig


@dataclass(frozen=True)
class TrainConfig(RunConfig):
    """One training run's settings (configs/train.yaml, composed and checked): RunConfig's
    (config/run_config.py) and the model's."""

    model: ModelConfig   # vocab_size: the tokenizer's; the trainer builds with the corpus's (with_vocab_size)

    @classmethod
    def from_composed(cls, cfg) -> "TrainConfig":
        """The typed settings of a composed config (a DictConfig), read once. Assumes the
        pre-flight's checks passed (launch/validate.py)."""
        return cls(**cls.fields_of(cfg), model=ModelConfig.from_composed(cfg, vocab_size=cfg.tokenizer.vocab_size))

    @property
    def seq_len(self) -> int:
        return self.model.seq_len
