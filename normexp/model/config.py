"""The model's own settings: its shape, and which norm, placement and init it uses."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..config.defaults import group_default, train_default
from ..config.keys import plain


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

    @classmethod
    def from_composed(cls, cfg: Mapping, vocab_size: int) -> "ModelConfig":
        """The model's settings of a composed config (a DictConfig, or the same as plain data):
        the shape as it is, the norm, placement and init nodes as plain dicts for their classes."""
        return cls(vocab_size=vocab_size, seq_len=cfg["seq_len"], layers=cfg["layers"], d_model=cfg["d_model"],
                   heads=cfg["heads"], mlp_ratio=cfg["mlp_ratio"], norm=plain(cfg["norm"]),
                   placement=plain(cfg["placement"]), init=plain(cfg["init"]), qk_norm=cfg["qk_norm"],
                   attn_softcap=cfg["attn_softcap"] or None,  # 0 and null: off
                   logit_softcap=cfg["logit_softcap"] or None, scale_embeddings=cfg["scale_embeddings"])

    def with_vocab_size(self, vocab_size: int) -> "ModelConfig":
        """The same model for a tokenizer of `vocab_size` tokens (the corpus's, known once it is loaded)."""
        return replace(self, vocab_size=vocab_size)
