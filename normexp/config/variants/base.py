"""The contracts of a variant's settings class, and the registries they are found in by name.

A settings class takes its settings as keyword-only constructor parameters, written without
default values (configs/<group>/<name>.yaml holds them; config/registry.py's `variant` fills
the ones a caller leaves out from there), and refuses a bad value there with a ConfigError
naming its key (`require`). It imports nothing heavier than the standard library, so asking it
costs no torch import: the pre-flight and `--cfg job` stay well under a second."""

from __future__ import annotations

from ..checks import is_positive_float32, require

# the run's model settings a placement may read or leave unread (PlacementSettings.reads)
MODEL_SETTINGS = ("norm", "qk_norm", "scale_embeddings")


class NormSettings:
    """A norm's settings (no settings by default).

    * `resolved()`: the settings the norm is built with, as summary.json's norm_settings
      records them.
    * `normalizes = False` on a norm that leaves its input as it is (the identity): QK-norm with
      it computes nothing, so the pre-flight refuses qk_norm=true beside it (rules.py
      `check_settings_read`).
    * `unpackable = "<why>"` on a norm a pack (model/packed.py) cannot compute as its members
      would alone (BatchNorm): rules.py's `pack_refusal` refuses it with that reason in its one line, and
      such a run trains alone.
    """

    normalizes = True
    unpackable: str | None = None

    def resolved(self) -> dict:
        return {}


class EpsSettings(NormSettings):
    """A norm whose one setting is the ε that keeps its division finite."""

    def __init__(self, *, eps: float):
        require(is_positive_float32(eps), "norm.eps", eps, "must be a number > 0")
        self.eps = eps

    def resolved(self) -> dict:
        return {"eps": self.eps}


class PlacementSettings:
    """A placement's settings (no settings by default).

    * `resolved(depth)`: the numbers a placement around a block of a `depth`-block model uses,
      "auto" worked out (DeepNorm's α and β, Mix-LN's Post-LN blocks, ...): what the placement
      module is built from, what summary.json's placement_settings and `--cfg job` show.
    * `reads`: which of the run's model settings outside its own node (MODEL_SETTINGS: the norm
      type, qk_norm, scale_embeddings) change what it computes: all by default; a placement that
      builds no norm (ReZero) or replaces them (nGPT) leaves them out, and the pre-flight refuses
      a value other than the default for a setting that nothing reads (rules.py
      `check_settings_read`): it would train the same run under another name.
    * `unpackable`: why a pack (model/packed.py) cannot compute this placement as its members
      would alone, in a few words (nGPT: its renormalization after each step and its logit
      scale); None (the default) where it can (rules.py's `pack_refusal`).
    """

    reads: frozenset[str] = frozenset(MODEL_SETTINGS)
    unpackable: str | None = None

    def resolved(self, depth: int) -> dict:
        return {}


class InitSettings:
    """An init scheme's settings: `scale_positions`, what the √d embedding scale multiplies
    (model/inits.py's XavierInit says what each value means)."""

    def __init__(self, *, scale_positions: bool):
        require(isinstance(scale_positions, bool), "init.scale_positions", scale_positions, "must be true or false")
        self.scale_positions = scale_positions

    def resolved(self) -> dict:
        return {"scale_positions": self.scale_positions}


NORM_SETTINGS: dict[str, type[NormSettings]] = {}
PLACEMENT_SETTINGS: dict[str, type[PlacementSettings]] = {}
INIT_SETTINGS: dict[str, type[InitSettings]] = {}
SETTINGS = {"norm": NORM_SETTINGS, "placement": PLACEMENT_SETTINGS, "init": INIT_SETTINGS}
