"""The model's own settings: its shape, and which norm, placement and init it uses, with the
rules that are the model's alone (the head split, the soft caps, QK-norm needing a norm).
Standard library only (with config/'s checks, defaults and keys; no Hydra, so model/ may import
it): the pre-flight builds and checks it before torch loads; model/ builds the GPT from it. The
names of the norm, placement and init are checked against the shipped options by the pre-flight
(launch/validate.py), their settings by their own classes (model/gpt.py `check_settings`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from .checks import FLOAT32_MAX, ConfigError, is_number
from .defaults import group_default, train_default
from .keys import plain


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
    def from_composed(cls, cfg: Mapping, vocab_size: int = 256) -> "ModelConfig":
        """The model's settings of a composed config (a DictConfig, or the same as plain data):
        the shape as it is, the norm, placement and init nodes as plain dicts for their classes.
        `vocab_size`: the tokenizer's, known once the corpus is loaded (the pre-flight's checks
        do not depend on it)."""
        return cls(vocab_size=vocab_size, seq_len=cfg["seq_len"], layers=cfg["layers"], d_model=cfg["d_model"],
                   heads=cfg["heads"], mlp_ratio=cfg["mlp_ratio"], norm=plain(cfg["norm"]),
                   placement=plain(cfg["placement"]), init=plain(cfg["init"]), qk_norm=cfg["qk_norm"],
                   attn_softcap=cfg["attn_softcap"] or None,  # 0 and null: off
                   logit_softcap=cfg["logit_softcap"] or None, scale_embeddings=cfg["scale_embeddings"])

    def with_vocab_size(self, vocab_size: int) -> "ModelConfig":
        """The same model for a tokenizer of `vocab_size` tokens (the corpus's, known once it is loaded)."""
        return replace(self, vocab_size=vocab_size)

    def name_of(self, group: str) -> str:
        """The registry name of the norm, placement or init (a name, or a node with `name`)."""
        node = getattr(self, group)
        return node.get("name") if isinstance(node, Mapping) else node

    def check(self) -> None:
        """The model's rules, each a one-line ConfigError (the pre-flight calls it after the
        shape's whole-number checks). Values as written, so the error names what the user wrote."""
        if self.d_model % self.heads:
            raise ConfigError("heads", self.heads, f"must divide d_model={self.d_model}")
        for key, gemma in (("attn_softcap", 50), ("logit_softcap", 30)):
            cap = getattr(self, key)  # 0 and null are both off (None here)
            # 1e308 is finite here but inf in float32, where c·tanh(z/c) would be nan
            if cap is not None and (not is_number(cap) or not 0 < cap <= FLOAT32_MAX):
                raise ConfigError(key, cap, f"must be null or 0 (off) or a finite number > 0 (Gemma 2 uses {gemma})")
        if self.qk_norm is True and self.name_of("norm") == "none":
            raise ConfigError("qk_norm", "true", "norm=none has no norm to apply to queries and keys; "
                              "choose a norm (e.g. norm=rms) or drop qk_norm=true")
