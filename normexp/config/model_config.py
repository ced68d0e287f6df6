"""The model's own settings: its shape, and which norm, placement and init it uses, with the
rules that are the model's alone (the head split, the soft caps, QK-norm needing a norm).
Standard library only (with config/'s checks, defaults and keys; no Hydra, so model/ may import
it): the pre-flight builds and checks it before torch loads; model/ builds the GPT from it. The
names of the norm, placement and init are checked against the shipped options by the pre-flight
(launch/validate.py), their settings by their settings classes (config/variants/ `check_settings`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from .checks import FLOAT32_MAX, ConfigError, is_number
from .defaults import group_default, train_default
from .keys import POSITIVE, plain, read_settings, setting


def _node(value, cfg):
    """The norm's, placement's or init's node as plain data, for its class."""
    return plain(value)


def _off_if_zero(value, cfg):
    """A soft cap: 0 and null are both off (None)."""
    return value or None


@dataclass
class ModelConfig:
    """The model's shape, and which norm and placement it uses. `norm` and `placement` are a
    registry name or the config node `{"name": ..., **settings}` (settings are the variant's
    own: eps, momentum, alpha, ratio, ...). Every default is configs/train.yaml's."""

    vocab_size: int = 256   # the byte tokenizer's; training sets the tokenizer's own
    seq_len: int = setting("seq_len", rule=POSITIVE, default=train_default("seq_len"))
    layers: int = setting("layers", rule=POSITIVE, default=train_default("layers"))
    d_model: int = setting("d_model", rule=POSITIVE, default=train_default("d_model"))
    heads: int = setting("heads", rule=POSITIVE, default=train_default("heads"))
    mlp_ratio: int = setting("mlp_ratio", rule=POSITIVE, default=train_default("mlp_ratio"))
    norm: str | Mapping = setting("norm", read=_node, default=group_default("norm"))
    placement: str | Mapping = setting("placement", read=_node, default=group_default("placement"))
    init: str | Mapping = setting("init", read=_node, default=group_default("init"))  # an INITS name (configs/init/)
    # normalize queries and keys per head with the run's norm type
    qk_norm: bool = setting("qk_norm", default=train_default("qk_norm"))
    # c in c·tanh(z/c) on the attention logits; None = off (Gemma 2); 0 and null are both off
    attn_softcap: float | None = setting("attn_softcap", read=_off_if_zero, default=train_default("attn_softcap"))
    # the same on the output logits, before the loss
    logit_softcap: float | None = setting("logit_softcap", read=_off_if_zero, default=train_default("logit_softcap"))
    # √d on the embedded input (GPT.embed says why here)
    scale_embeddings: bool = setting("scale_embeddings", default=train_default("scale_embeddings"))

    @classmethod
    def from_composed(cls, cfg: Mapping, vocab_size: int = 256) -> "ModelConfig":
        """The model's settings of a composed config (a DictConfig, or the same as plain data):
        the shape as it is, the norm, placement and init nodes as plain dicts for their classes.
        `vocab_size`: the tokenizer's, known once the corpus is loaded (the pre-flight's checks
        do not depend on it)."""
        return read_settings(cls, cfg, vocab_size=vocab_size)

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
