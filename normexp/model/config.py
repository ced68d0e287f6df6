"""The model's own settings: its shape, and which norm, placement and init it uses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..config.defaults import group_default, train_default


@dataclass
class ModelConfig:
    """The model's shape, and which norm and placement it uses. `norm` and `placement` are a
    registry name or the config node `{"name": ..., **settings}` (settings are the variant's
    own: eps, momentum, alpha, ratio, ...). Every default is configs/train.yaml's."""

    vocab_size: int = 256   # the byte tokenizer's; training sets the tokenizer's own
    seq_len: int = train_default("seq_len")
    layers: int = train_default("layers")
    d_model: int = train_default("d_model")
    heads: int = train_default("heads")
    mlp_ratio: int = train_default("mlp_ratio")
    norm: str | Mapping = group_default("norm")
    placement: str | Mapping = group_default("placement")
    init: str | Mapping = group_default("init")   # an INITS name (configs/init/)
    qk_norm: bool = train_default("qk_norm")            # normalize queries and keys per head with the run's norm type
    attn_softcap: float | None = train_default("attn_softcap")   # c in c·tanh(z/c) on the attention logits; None = off (Gemma 2)
    logit_softcap: float | None = train_default("logit_softcap")  # the same on the output logits, before the loss
    scale_embeddings: bool = train_default("scale_embeddings")   # √d on the embedded input (GPT.embed says why here)
