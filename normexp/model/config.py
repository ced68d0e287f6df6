"""The model's own settings: its shape, and which norm, placement and init it uses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass
class ModelConfig:
    """The model's shape, and which norm and placement it uses. `norm` and `placement` are a
    registry name or the config node `{"name": ..., **settings}` (settings are the variant's
    own: eps, momentum, alpha, ratio, ...)."""

    vocab_size: int = 256
    seq_len: int = 128
    layers: int = 6
    d_model: int = 128
    heads: int = 4
    mlp_ratio: int = 4
    norm: str | Mapping = "layer"
    placement: str | Mapping = "pre"
    init: str | Mapping = "xavier"   # an INITS name (configs/init/)
    qk_norm: bool = False            # normalize queries and keys per head with the run's norm type
    attn_softcap: float | None = None   # c in c·tanh(z/c) on the attention logits; None = off (Gemma 2)
    logit_softcap: float | None = None  # the same on the output logits, before the loss
