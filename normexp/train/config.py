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

from ..config.keys import setting
from ..config.model_config import ModelConfig
from ..config.run_config import RunConfig


def _model(cfg, _):
    """The model's settings, with the tokenizer's vocabulary size."""
    return ModelConfig.from_composed(cfg, vocab_size=cfg["tokenizer"]["vocab_size"])


@dataclass(frozen=True)
class TrainConfig(RunConfig):
    """One training run's settings (configs/train.yaml, composed and checked): RunConfig's
    (config/run_config.py) and the model's."""

    # vocab_size: the tokenizer's; the trainer builds with the corpus's (with_vocab_size)
    model: ModelConfig = setting(None, read=_model)

    @property
    def seq_len(self) -> int:
        return self.model.seq_len
